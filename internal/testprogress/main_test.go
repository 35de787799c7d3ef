package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testdata/stream.jsonl is recorded `go test -json -count=1` output of
// ./internal/slot/ (passes), a throwaway package with a passing, a failing, a
// skipped test and a failing subtest, one that does not build, and one
// without test files.
const (
	slot     = "github.com/relockio/relock/internal/slot"
	demo     = "github.com/relockio/relock/internal/tpdemo"
	broken   = "github.com/relockio/relock/internal/tpbroken"
	noTests  = "github.com/relockio/relock/internal/tpnotests"
	noQuiet  = time.Hour // no heartbeat in the tests that do not look for it
	waitLong = 10 * time.Second
)

func recorded(t *testing.T, keep func(line string) bool) string {
	t.Helper()
	b, err := os.ReadFile("testdata/stream.jsonl")
	require.NoError(t, err)
	var out []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l != "" && keep(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func all(string) bool { return true }

// of keeps the lines of the named packages (build events name the package
// in ImportPath).
func of(pkgs ...string) func(string) bool {
	return func(l string) bool {
		for _, p := range pkgs {
			if strings.Contains(l, `"`+p+`"`) || strings.Contains(l, `"`+p+` [`) {
				return true
			}
		}
		return false
	}
}

func runOn(t *testing.T, input string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := run(strings.NewReader(input), &out, noQuiet)
	return out.String(), code
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// requireInOrder checks that want appear in out, each after the one before.
func requireInOrder(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		require.GreaterOrEqual(t, i, 0, "missing, or out of order: %q in\n%s", w, out)
		rest = rest[i+len(w):]
	}
}

func TestWholeRecordedRun(t *testing.T) {
	out, code := runOn(t, recorded(t, all))
	require.Equal(t, 1, code, out)
	requireInOrder(t, out,
		"PASS "+slot+" TestOf (0.00s)\n",
		"ok  \t"+slot+"\t",
		"--- build failed: "+broken,
		"broken.go:3:28: undefined: undefinedName\n",
		"FAIL\t"+broken+" [build failed]\n",
		"PASS "+demo+" TestPasses",
		"--- output of "+demo+" TestFails:\n",
		"a line logged before the failure\n",
		"want 1, got 2\n",
		"FAIL "+demo+" TestFails",
		"SKIP "+demo+" TestSkips",
		"the subtest broke\n",
		"FAIL "+demo+" TestSub ",
		"FAIL\t"+demo+"\t",
		"?   \t"+noTests+"\t[no test files]\n",
	)
	require.NotContains(t, out, "quiet when it passes", "a passing test's output is not shown")
	require.NotContains(t, out, demo+" TestSub/good", "a passing subtest gets no line")
	require.Equal(t, "2 passed, 2 failed, 1 skipped", lastLine(out))
}

func TestPassingPackagesExitZero(t *testing.T) {
	out, code := runOn(t, recorded(t, of(slot, noTests)))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok  \t"+slot+"\t")
	require.Equal(t, "1 passed, 0 failed, 0 skipped", lastLine(out))
}

// A build failure has no test events at all: it must still fail the run,
// with the compiler's output shown.
func TestBuildFailureFailsTheRun(t *testing.T) {
	out, code := runOn(t, recorded(t, of(slot, broken)))
	require.Equal(t, 1, code, out)
	requireInOrder(t, out, "undefined: undefinedName", "FAIL\t"+broken, "FAIL: 1 package(s): "+broken)
	require.Equal(t, "1 passed, 0 failed, 0 skipped", lastLine(out))
}

// The same without the package's fail event (Go before 1.24 printed build
// errors outside the JSON stream): the build-fail event alone fails the run.
func TestBuildFailEventAloneFailsTheRun(t *testing.T) {
	out, code := runOn(t, recorded(t, func(l string) bool {
		return of(broken)(l) && !strings.Contains(l, `"Package"`)
	}))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "undefined: undefinedName")
}

// Input cut short inside a test (go test killed, say): the test's output is
// shown and the run fails.
func TestInputEndingMidTestFails(t *testing.T) {
	in := recorded(t, of(slot))
	in = in[:strings.Index(in, `"Action":"pass"`)]
	in = in[:strings.LastIndex(in, "\n")+1]
	out, code := runOn(t, in)
	require.Equal(t, 1, code, out)
	requireInOrder(t, out, "--- output of "+slot+" TestOf (did not finish):", "=== RUN   TestOf", "FAIL\t"+slot)
}

func TestEmptyInputFails(t *testing.T) {
	out, code := runOn(t, "")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "no test events read")
}

// Lines that are not events (a stray print to stdout) are shown as they are.
func TestNonJSONLinesShown(t *testing.T) {
	out, code := runOn(t, "something else\n"+recorded(t, of(slot)))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "something else\n")
}

// syncBuffer is a bytes.Buffer the heartbeat goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While a test runs and nothing else is printed, a heartbeat names it.
func TestHeartbeatNamesTheRunningTest(t *testing.T) {
	in := recorded(t, of(slot))
	cut := strings.Index(in, `"Action":"pass"`)
	cut = strings.LastIndex(in[:cut], "\n") + 1
	r, w := io.Pipe()
	var out syncBuffer
	code := make(chan int, 1)
	go func() { code <- run(r, &out, 50*time.Millisecond) }()
	_, err := io.WriteString(w, in[:cut]) // start, run, output: TestOf is running
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), "... still running: "+slot+" TestOf (")
	}, waitLong, 10*time.Millisecond)
	_, err = io.WriteString(w, in[cut:])
	require.NoError(t, err)
	require.NoError(t, w.Close())
	select {
	case c := <-code:
		require.Equal(t, 0, c, out.String())
	case <-time.After(waitLong):
		t.Fatal("run did not return after the input ended")
	}
	require.Equal(t, "1 passed, 0 failed, 0 skipped", lastLine(out.String()))
}
