package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tmuxPath finds tmux, installing it with apt-get when missing; the test
// fails, never skips, without it.
func tmuxPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("tmux"); err == nil {
		return p
	}
	out, err := exec.Command("apt-get", "install", "-y", "tmux").CombinedOutput()
	p, lerr := exec.LookPath("tmux")
	if lerr != nil {
		t.Fatalf("tmux is needed to test `relock watch` in a real terminal and could not be installed (apt-get install -y tmux: %v):\n%s", err, out)
	}
	return p
}

// screen is a relock watch running in a detached tmux session of 120x40.
type screen struct {
	t          *testing.T
	tmux, sock string
}

func (e *env) watch(name string) *screen {
	t := e.t
	s := &screen{t: t, tmux: tmuxPath(t), sock: fmt.Sprintf("relock-test-%d", time.Now().UnixNano())}
	// The shell keeps the pane open after relock exits, to show why.
	cmd := fmt.Sprintf("%s -addr %s -prefix %s watch %s; echo relock exited $?; sleep 600", e.bin, e.addr, e.prefix, name)
	out, err := exec.Command(s.tmux, "-L", s.sock, "new-session", "-d", "-s", "w", "-x", "120", "-y", "40", cmd).CombinedOutput()
	require.NoError(t, err, "tmux new-session: %s", out)
	t.Cleanup(func() { _ = exec.Command(s.tmux, "-L", s.sock, "kill-server").Run() })
	return s
}

// capture returns what the terminal shows now.
func (s *screen) capture() string {
	out, err := exec.Command(s.tmux, "-L", s.sock, "capture-pane", "-p", "-J", "-t", "w").Output()
	if err != nil {
		return "capture-pane: " + err.Error()
	}
	return string(out)
}

// waitFor waits until the screen satisfies ok, and returns it.
func (s *screen) waitFor(what string, ok func(string) bool) string {
	s.t.Helper()
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if last = s.capture(); ok(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond) // polling the terminal
	}
	s.t.Fatalf("the screen never showed %s; it shows:\n%s", what, last)
	return ""
}

// rowStarts reports whether a line of the screen starts with the fields.
func rowStarts(screen string, fields ...string) bool {
	for _, line := range strings.Split(screen, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// `relock watch` in a real terminal: it shows the holder and its waiter, and
// after an Unlock the waiter as the new holder and the hand-off in its log.
func TestWatchShowsHandOff(t *testing.T) {
	e := newEnv(t)
	const name = "jobs"
	c0, c1 := e.client(), e.client()
	m := c0.Mutex(name)
	lc, err := m.TryLock(e.ctx)
	require.NoError(t, err)
	released := false
	t.Cleanup(func() {
		if !released {
			_ = m.Unlock(lc)
		}
	})
	w := c1.Mutex(name)
	got := e.queue(func(ctx context.Context) (context.Context, error) { return w.Lock(ctx) }, w.Unlock)
	s := e.watch(name)
	before := s.waitFor("the holder and its waiter", func(sc string) bool {
		return rowStarts(sc, c0.ID()) && rowStarts(sc, "1", c1.ID()) && strings.Contains(sc, "QUEUE: 1 waiting")
	})
	t.Logf("before the Unlock:\n%s", strings.TrimRight(before, "\n"))

	require.NoError(t, m.Unlock(lc))
	released = true
	<-got
	after := s.waitFor("the new holder and the hand-off", func(sc string) bool {
		return rowStarts(sc, c1.ID()) && strings.Contains(sc, "QUEUE: 0 waiting") &&
			strings.Contains(sc, "hand-off "+c0.ID()+":1 -> "+c1.ID()+":1")
	})
	t.Logf("after the Unlock:\n%s", strings.TrimRight(after, "\n"))
	require.False(t, rowStarts(after, c0.ID()), "the old holder is still shown")
	require.NotContains(t, after, "relock exited")
}
