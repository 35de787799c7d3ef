package semaphore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// TestLostHolderPermitsReturn checks that the permits of a holder that never
// releases come back within its lease, and that the holder learns it lost them.
func TestLostHolderPermitsReturn(t *testing.T) {
	t.Run("fixed lease, never released", func(t *testing.T) {
		e := newEnv(t)
		const name = "lease"
		holder := e.sem(e.client(), name, 2)
		waiter := e.sem(e.client(), name, 2)
		const lease = 500 * time.Millisecond
		start := time.Now()
		h := mustAcquire(t, holder, e.ctx, 2, semaphore.WithLease(lease))
		r := receive(t, goAcquire(waiter, e.ctx, 2), 3*time.Second, "waiter behind a 500ms lease")
		waited := r.at.Sub(start)
		t.Logf("waiter acquired %v after the holder", waited)
		if waited < 300*time.Millisecond {
			t.Errorf("waiter acquired %v after a holder with a %v lease, before the lease ended", waited, lease)
		}
		waitDone(t, h, time.Second, "holder's permit context")
		if cause := context.Cause(h); !errors.Is(cause, semaphore.ErrLeaseLost) {
			t.Errorf("holder's permit context cause = %v, want ErrLeaseLost", cause)
		}
		if n := holder.Permits(h); n != 0 {
			t.Errorf("Permits of the lost lease = %d, want 0", n)
		}
		if err := holder.Release(h); !errors.Is(err, semaphore.ErrNotHeld) || !errors.Is(err, semaphore.ErrLeaseLost) {
			t.Errorf("Release of the lost lease: err = %v, want ErrNotHeld and ErrLeaseLost", err)
		}
		if st := e.state(waiter); st != (semaphore.State{Limit: 2, Held: 2}) {
			t.Errorf("state = %s, want the waiter's 2 held and nothing queued", stateString(st))
		}
		mustRelease(t, waiter, r.ctx)
	})

	t.Run("crashed Client", func(t *testing.T) {
		e := newEnv(t)
		const name = "crash"
		const watchdog = 600 * time.Millisecond
		// A crash: the rueidis client goes first, so that Close, which
		// would free the permits, cannot reach Redis.
		rc := redistest.Client(t, e.srv)
		crashing, err := rlock.New(rc, rlock.WithKeyPrefix(e.prefix), rlock.WithWatchdogTimeout(watchdog))
		if err != nil {
			t.Fatal(err)
		}
		holder := e.sem(crashing, name, 2)
		waiter := e.sem(e.client(), name, 2) // default watchdog: re-checks by the holder's expiry
		start := time.Now()
		h := mustAcquire(t, holder, e.ctx, 2)
		ch := goAcquire(waiter, e.ctx, 2)
		e.waitQueued(waiter, 1)
		// Close cannot release: the process is gone as far as Redis knows.
		rc.Close()
		if err := crashing.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if cause := context.Cause(h); !errors.Is(cause, semaphore.ErrLeaseLost) || !errors.Is(cause, semaphore.ErrClosed) {
			t.Errorf("holder's permit context cause after Close = %v, want ErrLeaseLost and ErrClosed", cause)
		}
		if st := e.state(waiter); st.Held != 2 {
			t.Errorf("state right after the crash = %s, want the 2 permits still held", stateString(st))
		}
		r := receive(t, ch, 3*time.Second, "waiter behind a crashed holder")
		waited := r.at.Sub(start)
		t.Logf("waiter acquired %v after the crashed holder", waited)
		if waited < 300*time.Millisecond {
			t.Errorf("waiter acquired %v after the holder, before its %v lease could end", waited, watchdog)
		}
		mustRelease(t, waiter, r.ctx)
	})
}

// TestClosedClient checks that a waiting Acquire returns ErrClosed when its
// Client closes, leaving no queue entry, and that every call fails with
// ErrClosed afterwards without touching Redis.
func TestClosedClient(t *testing.T) {
	e := newEnv(t)
	const name = "closed"
	other := e.sem(e.client(), name, 2)
	c := e.client()
	s := e.sem(c, name, 2)
	h := mustAcquire(t, s, e.ctx, 1)
	w := goAcquire(s, e.ctx, 2)
	e.waitQueued(other, 1)

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := receiveErr(t, w, 5*time.Second, "waiter of a closed Client")
	if !errors.Is(r.err, semaphore.ErrClosed) {
		t.Errorf("waiting Acquire after Close: err = %v, want ErrClosed", r.err)
	}
	// Close waits for the waiter's clean-up and the release of the permit.
	if st := e.state(other); st.Queued != 0 || st.Held != 0 {
		t.Errorf("state right after Close = %s, want the holder's permit released and nothing queued", stateString(st))
	}
	before := e.keys()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, semaphore.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", what, err)
		}
	}
	_, err := s.TrySetLimit(e.ctx, 1)
	check("TrySetLimit", err)
	check("SetLimit", s.SetLimit(e.ctx, 1))
	_, err = s.Limit(e.ctx)
	check("Limit", err)
	_, err = s.Available(e.ctx)
	check("Available", err)
	_, err = s.State(e.ctx)
	check("State", err)
	_, err = s.Acquire(e.ctx, 1)
	check("Acquire", err)
	_, err = s.TryAcquire(e.ctx, 1)
	check("TryAcquire", err)
	_, _, err = s.Drain(e.ctx)
	check("Drain", err)
	err = s.Release(h)
	check("Release", err)
	if !errors.Is(err, semaphore.ErrNotHeld) {
		t.Errorf("Release after Close: err = %v, want ErrNotHeld too", err)
	}
	_, err = semaphore.New(c, name).TryAcquire(e.ctx, 1)
	check("TryAcquire on a new Semaphore", err)
	_, err = semaphore.NewLock(c, "closed-lock").TryLock(e.ctx)
	check("TryLock", err)
	if after := e.keys(); len(after) != len(before) {
		t.Errorf("calls after Close changed Redis: keys %q -> %q", before, after)
	}
}

// TestNoThunderingHerd queues 20 waiters from two Clients for one permit and
// counts the scripts run while the permit is handed from one to the next: a
// release must wake the head of the queue only, not every waiter.
func TestNoThunderingHerd(t *testing.T) {
	e := ownedEnv(t)
	const (
		name    = "herd"
		waiters = 20
	)
	sems := []*semaphore.Semaphore{e.sem(e.client(), name, 1), e.sem(e.client(), name, 1)}
	holder := e.sem(e.client(), name, 1)
	h := mustAcquire(t, holder, e.ctx, 1)

	done := make(chan error, waiters)
	for i := range waiters {
		s := sems[i%2]
		go func() {
			p, err := s.Acquire(e.ctx, 1)
			if err != nil {
				done <- err
				return
			}
			done <- s.Release(p)
		}()
	}
	e.waitQueued(holder, waiters)
	if _, err := e.srv.Do(e.ctx, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	start := time.Now()
	mustRelease(t, holder, h)
	for range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiters not all served 10s after the release")
		}
	}
	elapsed := time.Since(start)
	stats, err := e.srv.CommandStats(e.ctx)
	if err != nil {
		t.Fatalf("CommandStats: %v", err)
	}
	scripts := redistest.ScriptCalls(stats)
	// 20 acquisitions and 21 releases are the floor.
	t.Logf("%d handoffs in %v: %d scripts (evalsha %d, eval %d), %d publishes",
		waiters, elapsed, scripts, stats["evalsha"], stats["eval"], stats["publish"])
	if limit := int64(4 * waiters); scripts > limit {
		t.Errorf("%d scripts for %d handoffs, want at most %d: releases wake more than the head", scripts, waiters, limit)
	}
	if limit := int64(2 * waiters); stats["publish"] > limit {
		t.Errorf("%d publishes for %d handoffs, want at most %d", stats["publish"], waiters, limit)
	}
	// Handoffs must be driven by wake-ups, not by the 10s re-check.
	if elapsed > 5*time.Second {
		t.Errorf("%d handoffs took %v", waiters, elapsed)
	}
}

// TestPubSubConnectionKilled drops the waiters' pub/sub connections and
// releases the permit before they are back, so the wake message is lost: the
// waiters must still be served promptly, by re-checking after the reconnect,
// well before their periodic re-check (a third of the 30s watchdog timeout).
func TestPubSubConnectionKilled(t *testing.T) {
	e := ownedEnv(t)
	const (
		name    = "killed"
		waiters = 6
	)
	opt := rlock.WithWatchdogTimeout(30 * time.Second)
	sems := []*semaphore.Semaphore{e.sem(e.client(opt), name, 1), e.sem(e.client(opt), name, 1)}
	holder := e.sem(e.client(opt), name, 1)
	h := mustAcquire(t, holder, e.ctx, 1)

	var mu sync.Mutex
	served := 0
	done := make(chan error, waiters)
	for i := range waiters {
		s := sems[i%2]
		go func() {
			p, err := s.Acquire(e.ctx, 1)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			served++
			mu.Unlock()
			done <- s.Release(p)
		}()
	}
	e.waitQueued(holder, waiters)
	grants := []string{semaphore.GrantChannel(sems[0]), semaphore.GrantChannel(sems[1])}
	subscribers := func() int64 { return e.numSub(grants[0]) + e.numSub(grants[1]) }
	waitFor(t, 5*time.Second, "both Clients subscribed", func() bool { return subscribers() == 2 })

	killed, err := e.srv.KillClients(e.ctx, "pubsub")
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	start := time.Now()
	mustRelease(t, holder, h) // its grant goes nowhere
	t.Logf("killed %d pub/sub connection(s); subscribers right after the release: %d (below 2: the grant was surely lost or refused)",
		killed, subscribers())
	if killed < 2 {
		t.Errorf("killed %d pub/sub connections, want the 2 of the waiting Clients", killed)
	}
	for range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(5 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("only %d of %d waiters served 5s after the release (re-check period is 10s)", served, waiters)
		}
	}
	t.Logf("all %d waiters served %v after the release", waiters, time.Since(start))
	e.waitState(holder, 2*time.Second, "nothing held or queued", func(st semaphore.State) bool { return st.Held == 0 && st.Queued == 0 })
}
