package semaphore_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// lockLoop has goroutines goroutines take and release l in a loop until stop
// is closed, counting acquisitions.
func lockLoop(t *testing.T, ctx context.Context, l *semaphore.Lock, goroutines int, stop <-chan struct{}, count *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := l.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				count.Add(1)
				if err := l.Unlock(p); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		})
	}
	return &wg
}

// TestTurnsPassWithoutScripts has 4 goroutines of one Client take a
// one-permit semaphore in turns while another Client contends: most
// acquisitions must be local passes, which run no script (a Redis acquisition
// and release cost at least two).
func TestTurnsPassWithoutScripts(t *testing.T) {
	e := ownedEnv(t)
	a := semaphore.NewLock(e.client(), "turns-passes")
	b := semaphore.NewLock(e.client(), "turns-passes")
	const perGoroutine = 200
	var bCount atomic.Int64
	stop := make(chan struct{})
	var bWG *sync.WaitGroup
	c := e.measure(4*perGoroutine, func() {
		bWG = lockLoop(t, e.ctx, b, 1, stop, &bCount)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range perGoroutine {
					p, err := a.Lock(e.ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					if err := a.Unlock(p); err != nil {
						t.Errorf("Unlock: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		bWG.Wait()
	})
	// b's acquisitions ran scripts too: count them against a's budget.
	t.Logf("a: %d acquisitions, b: %d; per acquisition of a: %v", 4*perGoroutine, bCount.Load(), c)
	if bCount.Load() == 0 {
		t.Errorf("the other Client was never served")
	}
	// Without passes every acquisition of a costs two scripts or more.
	if c.scripts > 0.8 {
		t.Errorf("%.2f scripts per acquisition: local passes run none", c.scripts)
	}
}

// TestTurnsAlternateClients checks that a Client passing the permit among its
// goroutines lets another Client in within its turn budget.
func TestTurnsAlternateClients(t *testing.T) {
	e := newEnv(t)
	a := semaphore.NewLock(e.client(), "turns-alternate")
	b := semaphore.NewLock(e.client(), "turns-alternate")
	var aCount atomic.Int64
	stop := make(chan struct{})
	wg := lockLoop(t, e.ctx, a, 4, stop, &aCount)
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 5*time.Second, "the first Client busy", func() bool { return aCount.Load() > 100 })
	worst := int64(0)
	for i := range 21 {
		before := aCount.Load()
		p, err := b.Lock(e.ctx)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if i > 0 {
			// Not the first: b's grant channel is subscribed already (it
			// lingers between b's calls), so b queues with its first script
			// instead of trying once, subscribing, and only then queueing,
			// a cold start during which a may run any number of turns.
			worst = max(worst, aCount.Load()-before)
		}
		if err := b.Unlock(p); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	t.Logf("the first Client made at most %d acquisitions while the other waited once", worst)
	// The turn in progress when b's Lock starts, one begun while b's script
	// is on its way, and one whose leader queued before b did: at most 65
	// holds each (the Redis acquisition and 64 passes). A turn's passes are
	// also bounded in time (2ms), so on a loaded machine, where b's script
	// can spend longer on its way than a whole turn, a fourth or fifth turn
	// may begin before b is queued (seen: 232 with the race detector and
	// other tests running). The bound allows two such turns: without turns
	// (barging) the other Client waits for thousands of acquisitions.
	if worst > 5*65+4 {
		t.Errorf("the first Client made %d acquisitions while the other waited: turns do not alternate", worst)
	}
}

// TestTurnsLostLeaseStopsPasses loses the permit's lease in Redis while a
// goroutine of the holder's Client waits for it: the lease must not be passed
// on; the loss is reported and the waiter acquires in Redis.
func TestTurnsLostLeaseStopsPasses(t *testing.T) {
	e := ownedEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(600 * time.Millisecond))
	l := semaphore.NewLock(c, "turns-lost")
	s := l.Semaphore()
	p1, err := l.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	ch := goAcquire(s, e.ctx, 1)
	waitFor(t, 5*time.Second, "the second goroutine waiting in the Client", func() bool { return semaphore.LocalWaiters(s) == 1 })
	if len(e.queue("turns-lost")) != 0 {
		t.Fatalf("a goroutine waiting in the Client is queued in Redis: %v", e.queue("turns-lost"))
	}
	if err := e.raw.Do(e.ctx, e.raw.B().Flushall().Build()).Error(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	waitDone(t, p1, 5*time.Second, "the lost hold's context")
	if cause := context.Cause(p1); !errors.Is(cause, semaphore.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if err := l.Unlock(p1); !errors.Is(err, semaphore.ErrNotHeld) || !errors.Is(err, semaphore.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease: %v, want ErrNotHeld and ErrLeaseLost", err)
	}
	got := receive(t, ch, 5*time.Second, "the waiter")
	if st := e.state(s); st.Held != 1 {
		t.Fatalf("after the waiter acquired, Redis holds %d permits, want 1 (it must acquire in Redis)", st.Held)
	}
	mustRelease(t, s, got.ctx)
}

// contendedTurn has Client ca (with the given linger) hold a one-permit
// semaphore name, taken from another Client while ca queued (so ca knows
// others wait), and that other Client queued behind it: a's Lock, its permit,
// and b's pending Lock.
func contendedTurn(t *testing.T, e *env, ca *rlock.Client, name string, linger time.Duration) (a, b *semaphore.Lock, pa context.Context, chB <-chan acquired) {
	t.Helper()
	semaphore.SetLinger(ca, linger)
	a = semaphore.NewLock(ca, name)
	b = semaphore.NewLock(e.client(), name)
	pb, err := b.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	chA := goAcquire(a.Semaphore(), e.ctx, 1)
	e.waitQueued(a.Semaphore(), 1)
	if err := b.Unlock(pb); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	pa = receive(t, chA, 5*time.Second, "a's Lock").ctx
	chB = goAcquire(b.Semaphore(), e.ctx, 1)
	e.waitQueued(b.Semaphore(), 1)
	return a, b, pa, chB
}

// TestTurnsParkAndCloseReleases checks the linger: a contended Client's last
// Release keeps the permit for its next Acquire (no script), and Close
// releases a parked permit at once, so the other Client's waiter gets it
// long before the linger ends.
func TestTurnsParkAndCloseReleases(t *testing.T) {
	e := ownedEnv(t)
	ca := e.client()
	a, b, pa, chB := contendedTurn(t, e, ca, "turns-park", time.Minute)
	if err := a.Unlock(pa); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	stillBlocked(t, chB, 50*time.Millisecond, "b's Lock while a's permit is parked")
	var again context.Context
	var err error
	c := e.measure(1, func() {
		if again, err = a.Lock(e.ctx); err != nil {
			t.Fatalf("Lock of the parked permit: %v", err)
		}
	})
	if c.scripts != 0 {
		t.Errorf("taking the parked permit ran %.0f scripts, want none", c.scripts)
	}
	if err := a.Unlock(again); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	stillBlocked(t, chB, 50*time.Millisecond, "b's Lock while a's permit is parked again")
	start := time.Now()
	if err := ca.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := receive(t, chB, 5*time.Second, "b's Lock after a's Client closed")
	t.Logf("b served %v after Close", time.Since(start).Round(time.Millisecond))
	mustRelease(t, b.Semaphore(), got.ctx)
}

// TestTurnsLingerFollowsTheRelockGap: a Client whose Locks came back at once
// after Unlock and then stop costs the waiting Client a linger fitted to
// those gaps (core.TurnLinger), not the whole one configured.
func TestTurnsLingerFollowsTheRelockGap(t *testing.T) {
	e := ownedEnv(t)
	const linger = 100 * time.Millisecond
	a, b, pa, chB := contendedTurn(t, e, e.client(), "turns-gap", linger)
	var err error
	for range 3 {
		if err := a.Unlock(pa); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if !semaphore.Parked(a.Semaphore()) {
			t.Fatal("the contended permit was not kept for a's next Lock")
		}
		if pa, err = a.Lock(e.ctx); err != nil {
			t.Fatalf("Lock: %v", err)
		}
	}
	start := time.Now()
	if err := a.Unlock(pa); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !semaphore.Parked(a.Semaphore()) {
		t.Fatal("the contended permit was not kept for a's next Lock")
	}
	got := receive(t, chB, 5*time.Second, "b's Lock after a stopped")
	waited := time.Since(start)
	if waited > linger*9/10 {
		t.Fatalf("b got the permit %v after a's last Unlock; want well within the %v linger", waited, linger)
	}
	t.Logf("b got the permit %v after a's last Unlock (linger up to %v)", waited, linger)
	mustRelease(t, b.Semaphore(), got.ctx)
}

// TestTurnsThroughput logs acquisitions per second of semaphore.NewLock and
// rlock.Mutex side by side, 4 Clients contending with 4 goroutines or 1
// each, relocking in a loop, with empty holds and 1ms ones; NewLock with the
// Mutex's default linger, and without one (while rlock does not fill
// core.Config.Linger, a Client's semaphores have none). Set
// RELOCK_TURNS_BENCH=1 to run it:
//
//	RELOCK_TURNS_BENCH=1 go test -run TestTurnsThroughput -v ./semaphore/
func TestTurnsThroughput(t *testing.T) {
	if os.Getenv("RELOCK_TURNS_BENCH") == "" {
		t.Skip("set RELOCK_TURNS_BENCH=1")
	}
	e := ownedEnv(t)
	const clients, run = 4, 2 * time.Second
	for _, per := range []int{4, 1} {
		for _, hold := range []time.Duration{0, time.Millisecond} {
			measure := func(kind string) float64 {
				var lockers []func() (func() error, error)
				name := "tp-" + kind + "-" + itoa(int64(per)) + "-" + hold.String()
				for range clients {
					c := e.client()
					if kind != "mutex" {
						if kind == "sem" {
							semaphore.SetLinger(c, rlock.DefaultLinger)
						}
						l := semaphore.NewLock(c, name)
						lockers = append(lockers, func() (func() error, error) {
							p, err := l.Lock(e.ctx)
							return func() error { return l.Unlock(p) }, err
						})
					} else {
						m := c.Mutex(name)
						lockers = append(lockers, func() (func() error, error) {
							p, err := m.Lock(e.ctx)
							return func() error { return m.Unlock(p) }, err
						})
					}
				}
				var n atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for _, lock := range lockers {
					for range per {
						wg.Go(func() {
							for {
								select {
								case <-stop:
									return
								default:
								}
								unlock, err := lock()
								if err != nil {
									t.Errorf("lock: %v", err)
									return
								}
								if hold > 0 {
									time.Sleep(hold) // the critical section
								}
								n.Add(1)
								if err := unlock(); err != nil {
									t.Errorf("unlock: %v", err)
									return
								}
							}
						})
					}
				}
				timer := time.NewTimer(run)
				<-timer.C
				close(stop)
				wg.Wait()
				return float64(n.Load()) / run.Seconds()
			}
			sem, sem0, mutex := measure("sem"), measure("sem-nolinger"), measure("mutex")
			t.Logf("%d Clients x %d goroutines, hold %v: NewLock %.0f acq/s (without linger %.0f), Mutex %.0f acq/s (%.2fx, without linger %.2fx)",
				clients, per, hold, sem, sem0, mutex, sem/mutex, sem0/mutex)
		}
	}
}

// TestTurnsLocalWaitTimeout checks that a goroutine waiting in its Client
// behind a holder of the same Client honours the wait timeout and ctx.
func TestTurnsLocalWaitTimeout(t *testing.T) {
	e := newEnv(t)
	l := semaphore.NewLock(e.client(), "turns-timeout")
	p, err := l.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	_, err = l.Lock(e.ctx, semaphore.WithWaitTimeout(20*time.Millisecond))
	if !errors.Is(err, semaphore.ErrNoPermits) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a wait timeout behind a holder of its Client: %v, want ErrNoPermits and DeadlineExceeded", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	ch := goAcquire(l.Semaphore(), ctx, 1)
	waitFor(t, 5*time.Second, "the waiter in the Client", func() bool { return semaphore.LocalWaiters(l.Semaphore()) == 1 })
	cancel()
	if got := receiveErr(t, ch, 5*time.Second, "the cancelled waiter"); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", got.err)
	}
	if n := semaphore.LocalWaiters(l.Semaphore()); n != 0 {
		t.Fatalf("%d waiters left in the Client", n)
	}
	// The holder releases with no one waiting: the permit is free in Redis.
	if err := l.Unlock(p); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if st := e.state(l.Semaphore()); st.Held != 0 {
		t.Fatalf("after the last Unlock, %d permits held in Redis", st.Held)
	}
}
