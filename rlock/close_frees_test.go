package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// TestCloseFreesHolds: a Client closed while it holds a Mutex, an RWMutex
// read lock and a semaphore permit frees all three in Redis, so that the
// Clients waiting for them get them within a second of Close rather than
// when the lease (the 30s watchdog timeout) runs out. Its lock contexts still
// end with a cause matching ErrLeaseLost and ErrClosed.
func TestCloseFreesHolds(t *testing.T) {
	srv := redistest.New(t)
	prefix := redistest.KeyPrefix(t)
	mk := func() *rlock.Client {
		c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x := mk()
	held := map[string]context.Context{}
	var err error
	if held["mutex"], err = x.Mutex("m").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if held["read lock"], err = x.RWMutex("rw").RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if held["permit"], err = semaphore.New(x, "s", semaphore.WithLimit(1)).Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}

	type got struct {
		what string
		at   time.Time
		err  error
	}
	results := make(chan got, 3)
	waiters := map[string]*rlock.Client{"mutex": mk(), "read lock": mk(), "permit": mk()}
	wait := func(what string, lock func() (context.Context, error)) {
		_, err := lock()
		results <- got{what, time.Now(), err}
	}
	go wait("mutex", func() (context.Context, error) { return waiters["mutex"].Mutex("m").Lock(ctx) })
	go wait("read lock", func() (context.Context, error) { return waiters["read lock"].RWMutex("rw").Lock(ctx) })
	go wait("permit", func() (context.Context, error) {
		return semaphore.New(waiters["permit"], "s", semaphore.WithLimit(1)).Acquire(ctx, 1)
	})
	for what, w := range waiters {
		eventually(t, 5*time.Second, "the waiter for the "+what+" never waited", func() bool {
			return w.PubSubStats().Waiters > 0
		})
	}

	closed := time.Now()
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for what, l := range held {
		cause := context.Cause(l)
		if !errors.Is(cause, rlock.ErrLeaseLost) || !errors.Is(cause, rlock.ErrClosed) {
			t.Errorf("the %s's lock context ended with %v, want ErrLeaseLost and ErrClosed", what, cause)
		}
	}
	timeout := time.After(time.Second + time.Until(closed))
	for range waiters {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("the waiter for the %s: %v", r.what, r.err)
			}
			if d := r.at.Sub(closed); d > time.Second {
				t.Errorf("the waiter for the %s got it %v after Close", r.what, d)
			}
		case <-timeout:
			t.Fatal("a waiter did not get what the closed Client held within 1s of Close")
		}
	}
}

// TestCloseWithHoldsPausedRedisIsPrompt: Close of a Client holding a Mutex,
// an RWMutex read lock and a semaphore permit returns within its grace when
// Redis does not answer (the releases are cut short; the holds expire with
// their lease).
func TestCloseWithHoldsPausedRedisIsPrompt(t *testing.T) {
	srv := redistest.Owned(t)
	c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(redistest.KeyPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Mutex("m").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex("rw").RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := semaphore.New(c, "s", semaphore.WithLimit(1)).Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	start := time.Now()
	_ = c.Close()
	if took := time.Since(start); took > pausedCloseBound {
		t.Errorf("Close took %v with Redis paused, want at most %v", took, pausedCloseBound)
	}
}
