package rlock_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestCloseWithRedisStopped: Close returns promptly with a Lock blocked on a
// Redis that stopped, although the waiter's clean-up (giving up its place in
// the queue) cannot reach Redis and would retry for the whole unlock timeout;
// it is cut short and leaves no goroutine behind. What it could not remove
// lapses in Redis by itself (see Client.Close).
func TestCloseWithRedisStopped(t *testing.T) {
	e := ftNewEnv(t)
	const name = "close-stopped"
	holder := e.client()
	held, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	redistest.KeepHeld(t, held)
	baseline := runtime.NumGoroutine()
	waiter, err := rlock.New(e.raw, rlock.WithKeyPrefix(e.prefix), rlock.WithUnlockTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Mutex(name).Lock(e.ctx, rlock.WithWaitTimeout(time.Minute))
		got <- err
	}()
	e.queuedIs(1)
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v with Redis stopped, want it prompt (the unlock timeout is 5s)", d)
	}
	select {
	case err := <-got:
		if !errors.Is(err, rlock.ErrClosed) {
			t.Errorf("blocked Lock returned %v, want ErrClosed", err)
		}
	case <-time.After(ftPatience):
		t.Fatal("the blocked Lock did not return after Close")
	}
	_ = holder.Close() // its holds are ended locally; Redis is gone anyway
	ftWaitGoroutines(t, baseline)
}
