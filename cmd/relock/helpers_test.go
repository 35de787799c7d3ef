package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// env is a Redis of the test's own, Clients on it, and the built relock.
type env struct {
	t      *testing.T
	ctx    context.Context
	srv    *redistest.Server
	addr   string
	prefix string
	bin    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, srv: srv, addr: srv.Addr(), prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":"), bin: build(t)}
}

func (e *env) client() *rlock.Client {
	e.t.Helper()
	c, err := rlock.New(redistest.Client(e.t, e.srv), rlock.WithKeyPrefix(e.prefix))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// build builds cmd/relock into the test's temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relock")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// cli runs the built relock against the env's Redis and returns its stdout.
func (e *env) cli(args ...string) string {
	e.t.Helper()
	full := append([]string{"-addr", e.addr, "-prefix", e.prefix}, args...)
	cmd := exec.CommandContext(e.ctx, e.bin, full...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		e.t.Fatalf("relock %v: %v: %s", args, err, ee.Stderr)
	}
	require.NoError(e.t, err)
	return string(out)
}

func (e *env) cliView(args ...string) view {
	e.t.Helper()
	var v view
	require.NoError(e.t, json.Unmarshal([]byte(e.cli(append(args, "-json")...)), &v))
	return v
}

// waitQueued waits until queued reports n waiters.
func (e *env) waitQueued(n int, queued func() int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return queued() == n }, 10*time.Second, 10*time.Millisecond, "want %d queued", n)
}

// queue runs acquire in a goroutine that keeps what it gets until the test
// ends; the channel is closed once it has it.
func (e *env) queue(acquire func(context.Context) (context.Context, error), release func(context.Context) error) <-chan struct{} {
	ctx, cancel := context.WithCancel(e.ctx)
	got, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		lc, err := acquire(ctx)
		if err != nil {
			return
		}
		close(got)
		<-ctx.Done()
		_ = release(lc)
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return got
}

// checkWaited checks a waited time against the local clock: the waiter
// queued after started and before confirmed (the server's clock is this
// machine's; 20ms allowed for the two readings).
func checkWaited(t *testing.T, waited time.Duration, started, confirmed, inspected time.Time) {
	t.Helper()
	const slack = 20 * time.Millisecond
	require.GreaterOrEqual(t, waited, inspected.Sub(confirmed)-slack, "waited too short")
	require.LessOrEqual(t, waited, time.Since(started)+slack, "waited too long")
}

// requireRow checks that a line of table starts with the given columns.
func requireRow(t *testing.T, table string, cols ...string) {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(cols) && slices.Equal(f[:len(cols)], cols) {
			return
		}
	}
	t.Fatalf("no row starting %v in:\n%s", cols, table)
}

// cliIn runs the built relock with stdin and returns its stdout and error.
func (e *env) cliIn(stdin string, args ...string) (string, error) {
	full := append([]string{"-addr", e.addr, "-prefix", e.prefix}, args...)
	cmd := exec.CommandContext(e.ctx, e.bin, full...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), err
}

// arrivalGap separates the arrivals of two waiters in the inspect tests.
const arrivalGap = 100 * time.Millisecond
