package semaphore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// liveClient is a Client whose grant channels stay subscribed long after its
// last wait: a release names its successor only on a live subscription.
func (e *env) liveClient() *rlock.Client {
	return e.client(rlock.WithPubSub(pubsub.WithLinger(time.Minute)))
}

// turnWithWaiter has a goroutine of Client ca (no linger) hold the one-permit
// semaphore name, taken from another Client while ca queued (so that ca's
// grant channel is subscribed), and a second goroutine of ca wait in ca
// behind it: the locks, the holder's permit, and the second goroutine's Lock.
func turnWithWaiter(t *testing.T, e *env, ca *rlock.Client, name string) (a, b *semaphore.Lock, p1 context.Context, ch2 <-chan acquired) {
	t.Helper()
	semaphore.SetLinger(ca, 0) // no park: the release that ends the turn goes to Redis
	a = semaphore.NewLock(ca, name)
	b = semaphore.NewLock(e.client(), name)
	pb, err := b.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	ch1 := goAcquire(a.Semaphore(), e.ctx, 1)
	e.waitQueued(a.Semaphore(), 1)
	mustRelease(t, b.Semaphore(), pb)
	p1 = receive(t, ch1, 5*time.Second, "a's first Lock").ctx
	ch2 = goAcquire(a.Semaphore(), e.ctx, 1)
	waitFor(t, 5*time.Second, "a's second goroutine waiting in its Client", func() bool { return semaphore.LocalWaiters(a.Semaphore()) == 1 })
	return a, b, p1, ch2
}

// queuedOf returns the entries of the Redis queue of name that belong to
// Client c.
func (e *env) queuedOf(name string, c *rlock.Client) []string {
	var out []string
	for _, entry := range e.queue(name) {
		if strings.HasPrefix(entry, c.ID()+":") {
			out = append(out, entry)
		}
	}
	return out
}

// TestTurnsSuccessorQueuedInRelease: the release that ends a turn while
// another goroutine of the Client waits queues that goroutine in Redis, behind
// the other Client's waiter it hands the permit to, in the same script; the
// goroutine then takes the permit handed to its place without a script of its
// own.
func TestTurnsSuccessorQueuedInRelease(t *testing.T) {
	e := ownedEnv(t)
	const name = "turns-successor"
	ca := e.liveClient()
	a, b, p1, ch2 := turnWithWaiter(t, e, ca, name)
	chB := goAcquire(b.Semaphore(), e.ctx, 1)
	e.waitQueued(b.Semaphore(), 1)

	semaphore.EndTurn(a.Semaphore())
	var got2 acquired
	c := e.measure(1, func() {
		mustRelease(t, a.Semaphore(), p1)
		// In the same step: b holds, and a's waiter is queued behind it.
		if q := e.queuedOf(name, ca); len(q) != 1 || len(e.queue(name)) != 1 {
			t.Errorf("after the release that ended a's turn the queue is %q; want a's next waiter alone", e.queue(name))
		}
		stillBlocked(t, ch2, 20*time.Millisecond, "a's second Lock while b holds")
		gotB := receive(t, chB, 5*time.Second, "b's Lock")
		mustRelease(t, b.Semaphore(), gotB.ctx)
		got2 = receive(t, ch2, 5*time.Second, "a's second Lock")
	})
	// a's release and b's: a's waiter queued in the first, and was handed the
	// permit in the second.
	if c.scripts != 2 {
		t.Errorf("%.0f scripts from a's release to a's next hold; want 2 (a's release, b's release)", c.scripts)
	}
	mustRelease(t, a.Semaphore(), got2.ctx)
	e.waitState(a.Semaphore(), 5*time.Second, "the permit free, the queue empty", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
}

// TestTurnsSuccessorServedInOneScript: the release that ends a turn while
// another goroutine of the Client waits, and no other Client waits in
// Redis, hands the permit on in its own script: kept for the Client (its
// lease re-set) and passed on when no one else is queued, or granted to the
// successor it queued when every waiter ahead turns out to be gone (its
// Client hears nothing).
func TestTurnsSuccessorServedInOneScript(t *testing.T) {
	for _, ghost := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "waiters-ahead-gone"}[ghost], func(t *testing.T) {
			e := ownedEnv(t)
			const name = "turns-one-script"
			a, _, p1, ch2 := turnWithWaiter(t, e, e.liveClient(), name)
			if ghost {
				entry := core.QueueEntry("ghost-client:1", 30*time.Second, 3*time.Second, "abcd", "1=1")
				for _, cmd := range [][]string{{"ZADD", e.base(name) + ":queue", "1", entry}, {"ZADD", e.base(name) + ":waiters", "9999999999999", entry}} {
					if err := e.raw.Do(e.ctx, e.raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
						t.Fatalf("%v: %v", cmd, err)
					}
				}
			}
			semaphore.EndTurn(a.Semaphore())
			var p2 context.Context
			c := e.measure(1, func() {
				mustRelease(t, a.Semaphore(), p1)
				p2 = receive(t, ch2, 5*time.Second, "a's second Lock").ctx
			})
			if c.scripts != 1 {
				t.Errorf("%.0f scripts from a's release to a's next hold; want 1, the release", c.scripts)
			}
			if st := e.state(a.Semaphore()); st.Held != 1 || st.Queued != 0 {
				t.Errorf("state %s while a's second goroutine holds; want the permit held, no one queued", stateString(st))
			}
			mustRelease(t, a.Semaphore(), p2)
			e.waitState(a.Semaphore(), 5*time.Second, "the permit free", func(st semaphore.State) bool { return st.Held == 0 && st.Queued == 0 })
		})
	}
}

// TestReleaseNamingSuccessor runs sem_release.lua naming a successor: with
// its PUBLISH refused it changes nothing (the successor is not left queued);
// allowed, it queues the successor behind the waiter it hands the permit to,
// and a retry of the request returns the same reply.
func TestReleaseNamingSuccessor(t *testing.T) {
	e := ownedEnv(t)
	const name = "release-naming"
	ca, acl := e.aclClient()
	a := semaphore.NewLock(ca, name)
	b := semaphore.NewLock(e.client(), name)
	pa, err := a.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	chB := goAcquire(b.Semaphore(), e.ctx, 1)
	e.waitQueued(b.Semaphore(), 1)
	before := e.queue(name)
	successor := ca.ID() + ":successor"

	acl("-publish")
	_, err = semaphore.ReleaseScriptNaming(e.ctx, a.Semaphore(), pa, "request-1", false, successor, false)
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("release with PUBLISH refused: %v; want NOPERM", err)
	}
	if q := e.queue(name); len(q) != 1 || q[0] != before[0] {
		t.Errorf("queue %q after the refused release; want %q: nothing changed", q, before)
	}
	if st := e.state(a.Semaphore()); st.Held != 1 {
		t.Errorf("state %s after the refused release; want the permit still held", stateString(st))
	}
	acl("+@all")

	out, err := semaphore.ReleaseScriptNaming(e.ctx, a.Semaphore(), pa, "request-2", false, successor, false)
	if err != nil || !out.Queued || out.Released != 1 || out.Arrival == 0 || out.Granted <= 0 {
		t.Fatalf("release naming a successor = %+v, %v; want released, the successor queued, the permit granted", out, err)
	}
	if q := e.queuedOf(name, ca); len(q) != 1 || !strings.HasPrefix(q[0], successor+"/") || len(e.queue(name)) != 1 {
		t.Errorf("queue %q; want the successor alone (b was granted the permit)", e.queue(name))
	}
	again, err := semaphore.ReleaseScriptNaming(e.ctx, a.Semaphore(), pa, "request-2", true, successor, false)
	if err != nil || again != out {
		t.Errorf("retried release = %+v, %v; want the first reply %+v", again, err, out)
	}
	gotB := receive(t, chB, 5*time.Second, "b's Acquire")
	mustRelease(t, b.Semaphore(), gotB.ctx)
	// b's release hands the permit to the successor, whose grant channel no
	// one here hears: it is dropped as a waiter whose Client is gone.
	e.waitState(a.Semaphore(), 5*time.Second, "the permit free, the queue empty", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
}

// reservedTurn has a worker of Client ca (linger: its linger) take the
// one-permit semaphore name in a loop while another Client's Lock waits, until
// its turn ends: the release that ends it hands the permit to the other
// Client and queues a place for ca's next Lock behind it. It returns the
// locks, the other Client's permit context, and when the last release began.
func reservedTurn(t *testing.T, e *env, ca *rlock.Client, name string, linger time.Duration) (a, b *semaphore.Lock, pb context.Context, released time.Time) {
	t.Helper()
	a, b, pa, chB := contendedTurn(t, e, ca, name, linger)
	for holds := 1; ; holds++ {
		released = time.Now()
		if err := a.Unlock(pa); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if !semaphore.Parked(a.Semaphore()) {
			break // the turn is over
		}
		if holds > 64 {
			t.Fatalf("the worker kept the permit for %d holds while another Client waited", holds)
		}
		var err error
		if pa, err = a.Lock(e.ctx); err != nil {
			t.Fatalf("Lock: %v", err)
		}
	}
	pb = receive(t, chB, 5*time.Second, "b's Lock").ctx
	return a, b, pb, released
}

// TestTurnsReservedPlaceTaken: a worker whose Locks took the permit kept for
// them ends its turn with a release that queues a place for its next Lock
// behind the Client it serves, and that Lock takes the place without a
// script: the permit comes with the other Client's release.
func TestTurnsReservedPlaceTaken(t *testing.T) {
	e := ownedEnv(t)
	const name = "turns-reserved"
	ca := e.liveClient()
	// A linger far beyond the test's pace: the place waits for a's Lock.
	a, b, pb, _ := reservedTurn(t, e, ca, name, 10*time.Second)
	if q := e.queuedOf(name, ca); len(q) != 1 {
		t.Fatalf("after the release that ended a's turn the queue is %q; want a place for a's next Lock", e.queue(name))
	}
	var got acquired
	c := e.measure(1, func() {
		ch := goAcquire(a.Semaphore(), e.ctx, 1)
		waitFor(t, 5*time.Second, "a's Lock waiting", func() bool { return semaphore.LocalWaiters(a.Semaphore()) == 1 })
		stillBlocked(t, ch, 20*time.Millisecond, "a's Lock while b holds")
		mustRelease(t, b.Semaphore(), pb)
		got = receive(t, ch, 5*time.Second, "a's Lock")
	})
	if c.scripts != 1 {
		t.Errorf("%.0f scripts for a's Lock and b's release; want 1: the Lock takes the reserved place", c.scripts)
	}
	if len(e.queue(name)) != 0 {
		t.Errorf("queue %q after a took its place", e.queue(name))
	}
	mustRelease(t, a.Semaphore(), got.ctx)
}

// TestTurnsReservedPlaceGivenUp: a place reserved for a Lock that never
// comes is given up once the linger has passed, not before, and nothing is
// left queued or held.
func TestTurnsReservedPlaceGivenUp(t *testing.T) {
	e := ownedEnv(t)
	const name = "turns-reserved-unused"
	const linger = 300 * time.Millisecond
	ca := e.liveClient()
	a, b, pb, released := reservedTurn(t, e, ca, name, linger)
	if q := e.queuedOf(name, ca); len(q) != 1 {
		t.Fatalf("after the release that ended a's turn the queue is %q; want a place for a's next Lock", e.queue(name))
	}
	waitFor(t, linger+5*time.Second, "the reserved place given up", func() bool { return len(e.queue(name)) == 0 })
	if waited := time.Since(released); waited < linger {
		t.Errorf("the place was given up %v after the release; want the %v linger first", waited, linger)
	}
	mustRelease(t, b.Semaphore(), pb)
	e.waitState(a.Semaphore(), 5*time.Second, "the permit free, the queue empty", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
}

// TestTurnsTwoWorkersTakeTurns: two worker processes, one goroutine each,
// locking a one-permit semaphore in a loop take turns as two Mutex workers
// do (see rlock's TestTwoWorkersTakeTurns): a release that ends a turn queues
// a place for its Client's next Lock, which takes it without a script.
func TestTurnsTwoWorkersTakeTurns(t *testing.T) {
	e := ownedEnv(t)
	const name, perWorker = "turns-two-workers", 120
	locks := make([]*semaphore.Lock, 2)
	for i := range locks {
		c := e.client()
		semaphore.SetLinger(c, 20*time.Millisecond)
		locks[i] = semaphore.NewLock(c, name)
		mustRelease(t, locks[i].Semaphore(), mustAcquire(t, locks[i].Semaphore(), e.ctx, 1)) // subscribe first
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	c := e.measure(2*perWorker, func() {
		for i, l := range locks {
			wg.Go(func() {
				for range perWorker {
					p, err := l.Lock(e.ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(200 * time.Microsecond) // the critical section
					if err := l.Unlock(p); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	if t.Failed() {
		return
	}
	switches := 0
	for i := 1; i < len(order); i++ {
		if order[i] != order[i-1] {
			switches++
		}
	}
	t.Logf("%d holds, %d switches between the workers; per hold: %v", len(order), switches, c)
	// Both run until done, so the permit must change hands; turns make it do
	// so about once per turn budget or burst, not once per hold.
	if switches == 0 || switches > len(order)/3 {
		t.Fatalf("%d switches in %d holds; want turns (at most a third)", switches, len(order))
	}
	if c.scripts > 0.5 {
		t.Fatalf("%.2f scripts per hold; want at most one per two holds", c.scripts)
	}
	// Nothing is left queued or held once both stopped: a reserved place no
	// Lock took is given up.
	e.waitState(locks[0].Semaphore(), 5*time.Second, "the permit free, the queue empty", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
}

// TestTurnsLimitAboveOneUnaffected: a semaphore whose limit is above one has
// no turns: each goroutine queues in Redis by itself, and a release names no
// successor.
func TestTurnsLimitAboveOneUnaffected(t *testing.T) {
	e := ownedEnv(t)
	const name = "turns-limit-two"
	ca := e.client()
	s := e.sem(ca, name, 2)
	x := e.sem(e.client(), name, 2)
	px := mustAcquire(t, x, e.ctx, 2)
	ch1, ch2 := goAcquire(s, e.ctx, 1), goAcquire(s, e.ctx, 1)
	e.waitQueued(s, 2)
	if n := semaphore.LocalWaiters(s); n != 0 {
		t.Fatalf("%d goroutines wait in the Client; want none (no turns above one permit)", n)
	}
	mustRelease(t, x, px)
	p1, p2 := receive(t, ch1, 5*time.Second, "the first Acquire"), receive(t, ch2, 5*time.Second, "the second Acquire")
	chX := goAcquire(x, e.ctx, 1)
	e.waitQueued(x, 1)
	ch3 := goAcquire(s, e.ctx, 1)
	e.waitQueued(s, 2)
	c := e.measure(1, func() { mustRelease(t, s, p1.ctx) })
	if c.scripts != 1 {
		t.Errorf("%.0f scripts for a release; want 1", c.scripts)
	}
	// The permit went to x, queued first; s's third Acquire, queued by
	// itself, still waits, and nothing else of s's Client was queued.
	got := receive(t, chX, 5*time.Second, "x's Acquire")
	if q := e.queuedOf(name, ca); len(q) != 1 {
		t.Errorf("s's Client has %q queued; want its third Acquire alone", q)
	}
	mustRelease(t, x, got.ctx)
	got3 := receive(t, ch3, 5*time.Second, "s's third Acquire")
	mustRelease(t, s, p2.ctx)
	mustRelease(t, s, got3.ctx)
	e.waitState(s, 5*time.Second, "the permits free, the queue empty", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
}
