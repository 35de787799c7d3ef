package redistest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// leakGrace is how long VerifyNoLeaks waits for goroutines to finish after
// the tests returned (clients closing connections, timers firing).
const leakGrace = 5 * time.Second

// defaultIgnored are substrings of goroutine stacks that are not leaks:
// process-wide background goroutines of the standard library. (The Docker
// fallback runs testcontainers in a helper process, so its reaper connection
// and HTTP keep-alives are not in this one.)
var defaultIgnored = []string{
	"os/signal.signal_recv",
	"os/signal.loop",
}

// VerifyNoLeaks runs the tests and then exits the process. For use as
//
//	func TestMain(m *testing.M) { redistest.VerifyNoLeaks(m) }
//
// After the tests it closes owned servers that were never closed, failing
// the run if there were any and naming them. Then, when the tests passed, it
// waits up to a few seconds for goroutines started by them to end and fails
// the run, printing their stacks, if any remain. Goroutines whose stack
// contains one of the ignore substrings (or of a small built-in list) are
// not counted.
func VerifyNoLeaks(m *testing.M, ignore ...string) {
	VerifyNoLeaksAfter(m, nil, ignore...)
}

// VerifyNoLeaksAfter is VerifyNoLeaks with a cleanup run between the tests and
// the checks: it stops what the tests share and cannot stop themselves (the
// server of the Example functions, say), so that it is not reported.
func VerifyNoLeaksAfter(m *testing.M, cleanup func(), ignore ...string) {
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	// Close forgotten servers first: their reaper goroutines would
	// otherwise be reported as leaks too.
	for _, s := range liveServers() {
		fmt.Fprintf(os.Stderr, "redistest: server %s was never closed\n", s.Addr())
		if err := s.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		}
		code = max(code, 1)
	}
	if code == 0 {
		if leaked := waitForLeaks(append(ignore, defaultIgnored...), leakGrace); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "redistest: %d goroutine(s) leaked by the tests:\n\n%s\n",
				len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// waitForLeaks polls until no unexpected goroutine remains or grace runs
// out, and returns the stacks of those left.
func waitForLeaks(ignore []string, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	delay := time.Millisecond
	for {
		leaked := unexpectedGoroutines(ignore)
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(delay) // polling with a deadline, not synchronisation
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// unexpectedGoroutines returns the stacks of all goroutines except the
// calling one, runtime-internal ones and those matching ignore.
func unexpectedGoroutines(ignore []string) []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// runtime.Stack lists the calling goroutine first.
	stacks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")[1:]
	var out []string
next:
	for _, st := range stacks {
		if onlyRuntime(st) {
			continue
		}
		for _, ig := range ignore {
			if ig != "" && strings.Contains(st, ig) {
				continue next
			}
		}
		out = append(out, st)
	}
	return out
}

// onlyRuntime reports whether every function in a goroutine's stack belongs
// to the runtime (GC workers and the like when GOTRACEBACK=system).
func onlyRuntime(stack string) bool {
	lines := strings.Split(stack, "\n")
	for _, l := range lines[1:] { // lines[0] is "goroutine N [state]:"
		if l == "" || strings.HasPrefix(l, "\t") {
			continue // file:line
		}
		fn := strings.TrimPrefix(l, "created by ")
		if !strings.HasPrefix(fn, "runtime.") {
			return false
		}
	}
	return true
}
