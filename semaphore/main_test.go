package semaphore_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// leakGrace is how long TestMain waits for goroutines to end after the tests
// returned (connections closing, timers firing) before calling them leaks.
const leakGrace = 5 * time.Second

// leakMarkers select the goroutines that count: those running code of this
// module or of rueidis.
var leakMarkers = []string{"github.com/relockio/relock/", "github.com/redis/rueidis"}

// TestMain runs the tests and examples, stops the examples' Redis (see
// example_test.go), then fails the run if goroutines of this module or of
// rueidis outlive the tests: a watchdog, a waiting Acquire, a background
// abandon, a Multiplexer connection, a rueidis client never closed.
//
// redistest.VerifyNoLeaks cannot be used as is: it calls m.Run itself and
// reports the examples' server, which can only be stopped after m.Run, as
// never closed. This is the same check, done after stopping that server.
func TestMain(m *testing.M) {
	code := m.Run()
	stopExampleServer()
	if code == 0 {
		if leaked := leakedGoroutines(leakGrace); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "semaphore: %d goroutine(s) leaked by the tests:\n\n%s\n",
				len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines polls until no goroutine of ours remains or grace passes,
// and returns the stacks of those left.
func leakedGoroutines(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	delay := time.Millisecond
	for {
		leaked := ourGoroutines()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(delay) // polling with a deadline
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func ourGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// The calling goroutine comes first: skip it.
	stacks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")[1:]
	var out []string
	for _, st := range stacks {
		for _, mark := range leakMarkers {
			if strings.Contains(st, mark) {
				out = append(out, st)
				break
			}
		}
	}
	return out
}
