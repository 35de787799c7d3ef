package semaphore_test

// The permit context's lifetime (issue #11), as rlock's lock context: the
// caller's ctx bounds the wait only; the permit context keeps its values and
// ends exactly when the permits do; Release with the wrong context says which
// one to pass; permits whose permit context is dropped are released, with a
// log line.

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

type ltKey struct{}

func permitCause(t *testing.T, permitCtx context.Context, want error, what string) {
	t.Helper()
	select {
	case <-permitCtx.Done():
	case <-time.After(testTimeout):
		t.Fatalf("%s: permit context still live", what)
	}
	if cause := context.Cause(permitCtx); !errors.Is(cause, want) {
		t.Fatalf("%s: cause %v, want %v", what, cause, want)
	}
}

// Cancelling the caller's ctx leaves the permits held and the permit context
// live, with ctx's values; Release then ends it with ErrReleased. The same
// for a one-permit lock (turns) and for a permit passed within the Client.
func TestPermitContextOutlivesCaller(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	s := e.sem(c, "outlive", 3)
	lock := semaphore.NewLock(c, "outlive-lock")
	ctx, cancel := context.WithCancel(context.WithValue(e.ctx, ltKey{}, "job-3"))
	defer cancel()

	p, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second Lock waits in the Client and is passed the permit.
	passed := make(chan error, 1)
	var lp context.Context
	go func() {
		var err error
		lp, err = lock.Lock(ctx)
		passed <- err
	}()
	waitFor(t, prompt, "the second Lock waits in the Client", func() bool {
		return semaphore.LocalWaiters(lock.Semaphore()) == 1
	})
	if err := lock.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if err := <-passed; err != nil {
		t.Fatalf("passed Lock: %v", err)
	}
	cancel()

	for what, pc := range map[string]context.Context{"permits": p, "passed lock": lp} {
		if pc.Err() != nil {
			t.Fatalf("%s: permit context ended with the caller's ctx: %v", what, context.Cause(pc))
		}
		if v := pc.Value(ltKey{}); v != "job-3" {
			t.Fatalf("%s: value %v, want the caller's", what, v)
		}
	}
	if n := s.Permits(p); n != 2 {
		t.Fatalf("Permits after the caller's cancel: %d, want 2", n)
	}
	if n := e.available(s); n != 1 {
		t.Fatalf("Available after the caller's cancel: %d, want 1", n)
	}
	if err := s.Release(p); err != nil {
		t.Fatalf("Release: %v", err)
	}
	permitCause(t, p, semaphore.ErrReleased, "permits")
	if err := lock.Unlock(lp); err != nil {
		t.Fatalf("Unlock of the passed lock: %v", err)
	}
	permitCause(t, lp, semaphore.ErrReleased, "passed lock")
}

// A holder whose own ctx was cancelled still learns of a loss: the permits'
// key deleted by hand, the cause is ErrLeaseLost.
func TestPermitContextLossAfterCallerCancel(t *testing.T) {
	e := newEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(600 * time.Millisecond))
	s := e.sem(c, "lost", 2)
	ctx, cancel := context.WithCancel(e.ctx)
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(e.base("lost")+":permits").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	permitCause(t, p, semaphore.ErrLeaseLost, "after the permits were deleted")
}

// Release with the context given to Acquire fails with an ErrNotHeld that
// says which context to pass, and releases nothing.
func TestReleaseWrongContext(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	s := e.sem(c, "wrong", 2)
	p, err := s.Acquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Release(e.ctx)
	if !errors.Is(err, semaphore.ErrNotHeld) || !strings.Contains(err.Error(), "pass the permit context that Acquire returned") {
		t.Fatalf("Release(ctx): %v, want ErrNotHeld saying to pass the permit context", err)
	}
	if n := e.available(s); n != 1 {
		t.Fatalf("Available after the wrong Release: %d, want 1", n)
	}
	if err := s.Release(p); err != nil {
		t.Fatal(err)
	}
}

// dropPermits acquires and drops the permit context without Release.
//
//go:noinline
func dropPermits(t *testing.T, s *semaphore.Semaphore, ctx context.Context, n int64) {
	t.Helper()
	if _, err := s.Acquire(ctx, n); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
}

// Permits whose permit context the program dropped without Release are
// released once the context is garbage, with a log line.
func TestDroppedPermitContextReleased(t *testing.T) {
	e := newEnv(t)
	logs := &redistest.LogBuffer{}
	c := e.client(rlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	s := e.sem(c, "drop", 3)
	lock := semaphore.NewLock(c, "drop-lock")
	dropPermits(t, s, e.ctx, 2)
	dropPermits(t, lock.Semaphore(), e.ctx, 1)
	require.Eventually(t, func() bool {
		runtime.GC()
		return strings.Count(logs.String(), "its hold was released") == 2
	}, 30*time.Second, 20*time.Millisecond, "two log lines")
	if n := e.available(s); n != 3 {
		t.Fatalf("Available after the dropped permits were released: %d, want 3", n)
	}
	// The lock's permit may be kept for the Client's next Lock for a linger
	// (turns): it is free for another Client within a linger, or at once.
	other := semaphore.NewLock(e.client(), "drop-lock")
	l, err := other.Lock(e.ctx, semaphore.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("another Client's Lock after the drop: %v", err)
	}
	if err := other.Unlock(l); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"lock=drop ", "lock=drop-lock", "kind=semaphore", "level=WARN"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
