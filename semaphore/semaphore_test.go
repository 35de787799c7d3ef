package semaphore_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// work stands for what a holder does with its permits: a simulated delay, not
// synchronisation.
func work(d time.Duration) { time.Sleep(d) }

// TestPermitsConservedUnderStorm has 3 Clients x 10 goroutines acquire 1 to 3
// of 5 permits and release them, while a fifth of the acquisitions have their
// context cancelled at a random moment (while waiting, or just after getting
// the permits) and a seventh give up after a short wait timeout. The permits in
// use, counted in process, never exceed the limit; afterwards every permit is
// back, the queue is empty and only the state hash, release latches and
// abandon tombstones remain in Redis.
func TestPermitsConservedUnderStorm(t *testing.T) {
	e := newEnv(t)
	const (
		name    = "storm"
		limit   = 5
		clients = 3
		workers = 10
		rounds  = 50
	)
	sems := make([]*semaphore.Semaphore, clients)
	for i := range sems {
		sems[i] = e.sem(e.client(), name, limit)
		// rueidis dials its pipelined connections lazily, each under the
		// context of the call that needs it first; when that context is
		// cancelled during the dial, the calls waiting for the same connection
		// fail too ("dial tcp ...: operation was canceled"), whatever their own
		// context. Dial them all now (commands with keys pick a connection at
		// random), so that the cancellations below only affect their own call.
		for range 32 {
			e.state(sems[i])
		}
	}

	var held, maxHeld atomic.Int64
	var granted, cancelledWaiting, cancelledHolding, timedOut, timedOutBare atomic.Int64
	stopAt := time.Now().Add(10 * time.Second) // bounds the run on a slow machine

	// A monitor checks Redis's own count while the storm runs.
	monitorDone := make(chan struct{})
	stopMonitor := make(chan struct{})
	go func() {
		defer close(monitorDone)
		for {
			select {
			case <-stopMonitor:
				return
			case <-time.After(10 * time.Millisecond):
			}
			st, err := sems[0].State(e.ctx)
			if err != nil {
				t.Errorf("State during the storm: %v", err)
				return
			}
			if st.Held > limit {
				t.Errorf("Redis counts %d permits held, above the limit %d", st.Held, limit)
			}
		}
	}()

	var wg sync.WaitGroup
	for w := range clients * workers {
		s := sems[w%clients]
		rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
		wg.Go(func() {
			for r := 0; r < rounds && time.Now().Before(stopAt); r++ {
				n := 1 + rng.Int64N(3)
				ctx, cancel := context.WithCancel(e.ctx)
				var opts []semaphore.AcquireOption
				cancels, cancelAfter := false, false
				timer := time.AfterFunc(time.Hour, cancel)
				timer.Stop()
				switch p := rng.IntN(20); {
				case p < 3: // cancelled at a random moment, mostly while waiting
					cancels = true
					timer.Reset(time.Duration(rng.IntN(6000)) * time.Microsecond)
				case p < 4: // cancelled just after the permits were granted
					cancels, cancelAfter = true, true
				case p < 6:
					opts = append(opts, semaphore.WithWaitTimeout(time.Duration(1+rng.IntN(15))*time.Millisecond))
				}
				permitCtx, err := s.Acquire(ctx, n, opts...)
				if err != nil {
					timer.Stop()
					cancel()
					switch {
					case cancels && errors.Is(err, context.Canceled):
						cancelledWaiting.Add(1)
					case len(opts) > 0 && errors.Is(err, semaphore.ErrNoPermits) && errors.Is(err, context.DeadlineExceeded):
						timedOut.Add(1)
					case len(opts) > 0 && errors.Is(err, context.DeadlineExceeded):
						// The timeout without ErrNoPermits: a known defect that
						// TestWaitTimeoutError reports; here only conservation counts.
						timedOut.Add(1)
						timedOutBare.Add(1)
					default:
						t.Errorf("worker %d round %d: Acquire(%d) (cancellable %v, wait timeout %v, ctx err %v): unexpected error %q",
							w, r, n, cancels, len(opts) > 0, ctx.Err(), err)
					}
					continue
				}
				if cancelAfter {
					cancel()
				}
				granted.Add(1)
				now := held.Add(n)
				for m := maxHeld.Load(); now > m && !maxHeld.CompareAndSwap(m, now); m = maxHeld.Load() {
				}
				if now > limit {
					t.Errorf("worker %d: %d permits in use after acquiring %d, limit %d", w, now, n, limit)
				}
				if got := s.Permits(permitCtx); got != n {
					t.Errorf("worker %d: Permits = %d, want %d", w, got, n)
				}
				work(time.Duration(rng.IntN(1500)) * time.Microsecond)
				if cancels && ctx.Err() != nil {
					cancelledHolding.Add(1)
				}
				held.Add(-n) // before Release: the permits may go to someone else at once
				if err := s.Release(permitCtx); err != nil {
					t.Errorf("worker %d round %d: Release of %d (ctx cancelled: %v): %v", w, r, n, ctx.Err() != nil, err)
				}
				timer.Stop()
				cancel()
			}
		})
	}
	wg.Wait()
	close(stopMonitor)
	<-monitorDone
	t.Logf("granted %d, cancelled while waiting %d, cancelled while holding %d, timed out %d (%d without ErrNoPermits), max in use %d",
		granted.Load(), cancelledWaiting.Load(), cancelledHolding.Load(), timedOut.Load(), timedOutBare.Load(), maxHeld.Load())
	if t.Failed() {
		t.FailNow()
	}
	if cancelledWaiting.Load() == 0 || timedOut.Load() == 0 || granted.Load() < 100 {
		t.Errorf("the storm did not exercise every path (see counts above)")
	}

	// Abandons run in the background: the state settles shortly.
	st := e.waitState(sems[1], 5*time.Second, "every permit back and an empty queue", func(st semaphore.State) bool {
		return st.Held == 0 && st.Queued == 0
	})
	if st.Limit != limit {
		t.Errorf("limit = %d after the storm, want %d", st.Limit, limit)
	}
	if n := e.available(sems[2]); n != limit {
		t.Errorf("Available = %d after the storm, want %d", n, limit)
	}
	if h := e.hgetall(e.base(name)); h["used"] != "0" || h["limit"] != "5" {
		t.Errorf("state hash = %v, want limit 5 and used 0", h)
	}
	if bad := e.unexpectedKeys(name, "latch", "gone"); len(bad) > 0 {
		t.Errorf("keys left after the storm besides the state hash, latches and tombstones: %q", bad)
	}
	// And the semaphore is fully usable: all permits at once, without waiting.
	p, err := sems[0].TryAcquire(e.ctx, limit)
	if err != nil {
		t.Fatalf("TryAcquire(%d) after the storm: %v", limit, err)
	}
	mustRelease(t, sems[0], p)
}

// TestAcquireManyWaitsForEnoughReleases queues Acquire(3) behind three holders
// of one permit each: it stays blocked while one or two are free, and gets all
// three promptly once the last holder releases.
func TestAcquireManyWaitsForEnoughReleases(t *testing.T) {
	e := newEnv(t)
	const name = "many"
	holders := e.sem(e.client(), name, 3)
	s := e.sem(e.client(), name, 3)
	var h [3]context.Context
	for i := range h {
		h[i] = mustAcquire(t, holders, e.ctx, 1)
	}
	ch := goAcquire(s, e.ctx, 3)
	e.waitQueued(s, 1)

	for i := range 2 {
		mustRelease(t, holders, h[i])
		stillBlocked(t, ch, 300*time.Millisecond, "Acquire(3) after "+itoa(int64(i+1))+" release(s)")
		if st := e.state(s); st.Held != int64(2-i) || st.Queued != 1 {
			t.Fatalf("state after %d release(s) = %s, want Held %d, Queued 1", i+1, stateString(st), 2-i)
		}
		// The free permits are kept for the head of the queue.
		if _, err := holders.TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
			t.Fatalf("TryAcquire(1) with Acquire(3) queued: err = %v, want ErrNoPermits", err)
		}
	}
	start := time.Now()
	mustRelease(t, holders, h[2])
	r := receive(t, ch, prompt, "Acquire(3) after the third release")
	t.Logf("Acquire(3) got its permits %v after the last release", r.at.Sub(start))
	if got := s.Permits(r.ctx); got != 3 {
		t.Errorf("Permits = %d, want 3", got)
	}
	if st := e.state(s); st.Held != 3 || st.Queued != 0 {
		t.Errorf("state while Acquire(3) holds = %s, want Held 3, Queued 0", stateString(st))
	}
	mustRelease(t, s, r.ctx)
	if n := e.available(s); n != 3 {
		t.Errorf("Available after all releases = %d, want 3", n)
	}
}

// TestAbandonedWaitersLeaveNothingBehind has waiters give up, by wait timeout
// and by cancellation, and checks that they leave no queue entry, no
// subscription (with pub/sub linger 0) and no goroutine behind.
func TestAbandonedWaitersLeaveNothingBehind(t *testing.T) {
	e := newEnv(t)
	const name = "abandon"
	holderSem := e.sem(e.client(), name, 1)
	c1 := e.client(rlock.WithPubSub(pubsub.WithLinger(0)))
	c2 := e.client(rlock.WithPubSub(pubsub.WithLinger(0)))
	s1, s2 := e.sem(c1, name, 1), e.sem(c2, name, 1)
	grants := []string{semaphore.GrantChannel(s1), semaphore.GrantChannel(s2)}
	held := mustAcquire(t, holderSem, e.ctx, 1)

	settled := func(what string) {
		t.Helper()
		e.waitQueued(s1, 0)
		waitFor(t, 5*time.Second, what+": no subscriber on the grant channels", func() bool {
			return e.numSub(grants[0]) == 0 && e.numSub(grants[1]) == 0
		})
		// Only the holder's permit may remain, besides tombstones.
		var rest []string
		for _, k := range e.unexpectedKeys(name, "gone", "latch") {
			if k != e.base(name)+":permits" && k != e.base(name)+":counts" {
				rest = append(rest, k)
			}
		}
		if len(rest) > 0 {
			t.Fatalf("%s: keys left besides the holder's permit: %q", what, rest)
		}
	}

	// Warm up: the first waiter of each Client starts its pub/sub connection,
	// which lives as long as the Client.
	for _, s := range []*semaphore.Semaphore{s1, s2} {
		if _, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(20*time.Millisecond)); !errors.Is(err, semaphore.ErrNoPermits) {
			t.Fatalf("warm-up Acquire: err = %v, want ErrNoPermits", err)
		}
	}
	settled("after warm-up")
	baseline := moduleGoroutines()

	const each = 4
	type outcome struct {
		err      error
		timedOut bool
	}
	results := make(chan outcome, 4*each)
	var cancels []context.CancelFunc
	for i := range 2 * each {
		s := []*semaphore.Semaphore{s1, s2}[i%2]
		go func() {
			_, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(400*time.Millisecond))
			results <- outcome{err, true}
		}()
		ctx, cancel := context.WithCancel(e.ctx)
		cancels = append(cancels, cancel)
		go func() {
			_, err := s.Acquire(ctx, 1)
			results <- outcome{err, false}
		}()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	e.waitState(s1, 5*time.Second, "all waiters queued", func(st semaphore.State) bool { return st.Queued == 4*each })
	for i, ch := range grants {
		if n := e.numSub(ch); n != 1 {
			t.Errorf("subscribers on the grant channel of Client %d with its waiters waiting = %d, want 1", i+1, n)
		}
	}
	for _, c := range cancels {
		c()
	}
	for range 4 * each {
		select {
		case o := <-results:
			switch {
			// The exact error of a timed-out waiter is TestWaitTimeoutError's concern.
			case o.timedOut && !errors.Is(o.err, context.DeadlineExceeded):
				t.Errorf("timed-out waiter: err = %v, want DeadlineExceeded", o.err)
			case !o.timedOut && !errors.Is(o.err, context.Canceled):
				t.Errorf("cancelled waiter: err = %v, want context.Canceled", o.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiters still waiting 5s after cancellation and past their wait timeout")
		}
	}
	settled("after the waiters gave up")
	var left []string
	waitFor(t, 5*time.Second, "goroutines of the module back to the "+itoa(int64(len(baseline)))+" before the waiters", func() bool {
		left = moduleGoroutines()
		return len(left) <= len(baseline)
	}, func() string { return "left:\n" + strings.Join(left, "\n\n") })

	// No stale head blocks the queue: the permit goes straight to a newcomer
	// once released.
	mustRelease(t, holderSem, held)
	p, err := s2.TryAcquire(e.ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire after the holder released: %v (a stale waiter is still queued?)", err)
	}
	mustRelease(t, s2, p)
}

// TestWaitTimeoutError has many waiters of one Client give up by
// WithWaitTimeout at about the same moment: each must fail with an error
// matching ErrNoPermits and context.DeadlineExceeded, as documented, whatever
// it was doing when the timeout ran out.
func TestWaitTimeoutError(t *testing.T) {
	e := newEnv(t)
	const (
		name    = "wait-timeout"
		waiters = 10
		rounds  = 3
	)
	holder := e.sem(e.client(), name, 1)
	s := e.sem(e.client(), name, 1)
	h := mustAcquire(t, holder, e.ctx, 1)
	bad := 0
	for round := range rounds {
		errs := make(chan error, waiters)
		for range waiters {
			go func() {
				_, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(200*time.Millisecond))
				errs <- err
			}()
		}
		for range waiters {
			select {
			case err := <-errs:
				if !errors.Is(err, semaphore.ErrNoPermits) || !errors.Is(err, context.DeadlineExceeded) {
					bad++
					t.Errorf("round %d: Acquire with an expired wait timeout: err = %q, want ErrNoPermits and DeadlineExceeded", round, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: waiters still waiting 5s after their 200ms wait timeout", round)
			}
		}
		e.waitQueued(holder, 0)
	}
	if bad > 0 {
		t.Logf("%d of %d timed-out waiters reported the timeout without ErrNoPermits", bad, waiters*rounds)
	}
	mustRelease(t, holder, h)
}

// TestSetLimitAtRunTime raises and lowers the limit with permits held and
// waiters queued.
func TestSetLimitAtRunTime(t *testing.T) {
	t.Run("raise wakes waiters", func(t *testing.T) {
		e := newEnv(t)
		const name = "raise"
		admin := e.sem(e.client(), name, 1)
		s1, s2 := e.sem(e.client(), name, 1), e.sem(e.client(), name, 1)
		held := mustAcquire(t, admin, e.ctx, 1)
		w1 := goAcquire(s1, e.ctx, 1)
		e.waitQueued(admin, 1)
		w2 := goAcquire(s2, e.ctx, 1)
		e.waitQueued(admin, 2)

		start := time.Now()
		if err := admin.SetLimit(e.ctx, 3); err != nil {
			t.Fatalf("SetLimit(3): %v", err)
		}
		r1 := receive(t, w1, prompt, "first waiter after raising the limit")
		r2 := receive(t, w2, prompt, "second waiter after raising the limit")
		t.Logf("waiters woken after %v and %v", r1.at.Sub(start), r2.at.Sub(start))
		if st := e.state(admin); st != (semaphore.State{Limit: 3, Held: 3, Queued: 0}) {
			t.Errorf("state = %s, want {Limit 3, Held 3, Queued 0}", stateString(st))
		}
		mustRelease(t, s1, r1.ctx)
		mustRelease(t, s2, r2.ctx)
		mustRelease(t, admin, held)
	})

	t.Run("lower while held", func(t *testing.T) {
		e := newEnv(t)
		const name = "lower"
		admin := e.sem(e.client(), name, 3)
		holders := e.sem(e.client(), name, 3)
		s := e.sem(e.client(), name, 3)
		var h [3]context.Context
		for i := range h {
			h[i] = mustAcquire(t, holders, e.ctx, 1)
		}
		if err := admin.SetLimit(e.ctx, 1); err != nil {
			t.Fatalf("SetLimit(1): %v", err)
		}
		if st := e.state(admin); st != (semaphore.State{Limit: 1, Held: 3}) {
			t.Fatalf("state after lowering = %s, want {Limit 1, Held 3, Queued 0}", stateString(st))
		}
		if n := e.available(admin); n != 0 {
			t.Errorf("Available with the limit below the permits held = %d, want 0", n)
		}
		start := time.Now()
		if _, err := s.Acquire(e.ctx, 2); !errors.Is(err, semaphore.ErrExceedsLimit) {
			t.Fatalf("Acquire(2) with limit 1: err = %v, want ErrExceedsLimit", err)
		} else if d := time.Since(start); d > time.Second {
			t.Errorf("Acquire(2) with limit 1 took %v to fail, want at once", d)
		}
		if _, err := s.TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
			t.Fatalf("TryAcquire(1) with 3 held of 1: err = %v, want ErrNoPermits", err)
		}
		if st := e.state(admin); st.Queued != 0 {
			t.Fatalf("queue after the failed calls = %d, want 0", st.Queued)
		}

		w := goAcquire(s, e.ctx, 1)
		e.waitQueued(admin, 1)
		for i := range 2 {
			mustRelease(t, holders, h[i]) // the holders finish normally
			stillBlocked(t, w, 200*time.Millisecond, "Acquire(1) with "+itoa(int64(2-i))+" held of 1")
		}
		if st := e.state(admin); st != (semaphore.State{Limit: 1, Held: 1, Queued: 1}) {
			t.Fatalf("state = %s, want {Limit 1, Held 1, Queued 1}", stateString(st))
		}
		mustRelease(t, holders, h[2])
		r := receive(t, w, prompt, "Acquire(1) once nothing is held")
		if st := e.state(admin); st != (semaphore.State{Limit: 1, Held: 1}) {
			t.Errorf("state = %s, want {Limit 1, Held 1, Queued 0}", stateString(st))
		}
		mustRelease(t, s, r.ctx)
		if n := e.available(admin); n != 1 {
			t.Errorf("Available at the end = %d, want 1", n)
		}
	})
}

// TestSetLimitBelowQueuedRequest lowers the limit below what the waiter at the
// head of the queue asks for, with a smaller waiter behind it, and releases
// every permit. The large request can never be granted now: it must fail with
// ErrExceedsLimit (as documented for Acquire), and the waiter behind it must get
// the free permit promptly, not after its periodic re-check (a third of the 30s
// watchdog timeout).
func TestSetLimitBelowQueuedRequest(t *testing.T) {
	e := newEnv(t)
	const name = "lower-below-head"
	admin := e.sem(e.client(), name, 3)
	holders := e.sem(e.client(), name, 3)
	big, small := e.sem(e.client(), name, 3), e.sem(e.client(), name, 3)
	var h [3]context.Context
	for i := range h {
		h[i] = mustAcquire(t, holders, e.ctx, 1)
	}
	wBig := goAcquire(big, e.ctx, 2)
	e.waitQueued(admin, 1)
	wSmall := goAcquire(small, e.ctx, 1)
	e.waitQueued(admin, 2)

	start := time.Now()
	if err := admin.SetLimit(e.ctx, 1); err != nil {
		t.Fatalf("SetLimit(1): %v", err)
	}
	for i := range h {
		mustRelease(t, holders, h[i])
	}
	deadline := time.After(prompt)
	var bigDone, smallDone bool
	for !bigDone || !smallDone {
		select {
		case r := <-wBig:
			bigDone = true
			t.Logf("Acquire(2) returned after %v: %v", r.at.Sub(start), r.err)
			if !errors.Is(r.err, semaphore.ErrExceedsLimit) {
				t.Errorf("Acquire(2) after the limit was lowered to 1: err = %v, want ErrExceedsLimit", r.err)
			}
		case r := <-wSmall:
			smallDone = true
			t.Logf("Acquire(1) returned after %v: %v", r.at.Sub(start), r.err)
			if r.err != nil {
				t.Errorf("Acquire(1) behind the request that no longer fits: %v", r.err)
			} else {
				defer mustRelease(t, small, r.ctx)
			}
		case <-deadline:
			st := e.state(admin)
			if !bigDone {
				t.Errorf("Acquire(2) still blocked %v after the limit was lowered to 1 (state %s), want ErrExceedsLimit", prompt, stateString(st))
			}
			if !smallDone {
				t.Errorf("Acquire(1) still blocked %v after every permit was released (state %s): held up by the request that no longer fits", prompt, stateString(st))
			}
			return
		}
	}
}

// TestLargeRequestNotStarved keeps a stream of Acquire(1) calls going from
// several goroutines and Clients, then asks for all four permits: strict FIFO
// order must grant it within a bound although small requests keep coming.
func TestLargeRequestNotStarved(t *testing.T) {
	e := newEnv(t)
	const (
		name  = "starve"
		limit = 4
	)
	streamCtx, stopStream := context.WithCancel(e.ctx)
	defer stopStream()
	var smallHeld, smallGranted atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		s := e.sem(e.client(), name, limit)
		for range 4 {
			wg.Go(func() {
				for streamCtx.Err() == nil {
					p, err := s.Acquire(streamCtx, 1)
					if err != nil {
						if streamCtx.Err() == nil {
							t.Errorf("small Acquire: %v", err)
						}
						return
					}
					smallHeld.Add(1)
					smallGranted.Add(1)
					work(time.Duration(500+rand.IntN(2000)) * time.Microsecond)
					smallHeld.Add(-1)
					if err := s.Release(p); err != nil {
						t.Errorf("small Release: %v", err)
						return
					}
				}
			})
		}
	}
	defer wg.Wait()
	waitFor(t, 5*time.Second, "the stream of small requests to run", func() bool { return smallGranted.Load() >= 50 })

	big := e.sem(e.client(), name, limit)
	before := smallGranted.Load()
	start := time.Now()
	p, err := big.Acquire(e.ctx, limit, semaphore.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire(%d) amid a stream of Acquire(1): %v (small ones granted meanwhile: %d)", limit, err, smallGranted.Load()-before)
	}
	t.Logf("Acquire(%d) granted after %v; small ones granted meanwhile: %d", limit, time.Since(start), smallGranted.Load()-before)
	if n := smallHeld.Load(); n != 0 {
		t.Errorf("%d small permits in use while Acquire(%d) holds them all", n, limit)
	}
	if st := e.state(big); st.Held != limit {
		t.Errorf("state while the large request holds = %s, want Held %d", stateString(st), limit)
	}
	mustRelease(t, big, p)
	// The stream resumes.
	after := smallGranted.Load()
	waitFor(t, 5*time.Second, "the stream to resume", func() bool { return smallGranted.Load() > after+10 })
	stopStream()
	wg.Wait()
	e.waitState(big, 5*time.Second, "all permits back", func(st semaphore.State) bool { return st.Held == 0 && st.Queued == 0 })
}

// TestStrictFIFOKeepsPermitsForTheHead checks that a queued large request is
// not overtaken: TryAcquire, Drain and later Acquire calls for fewer permits
// fail or wait although enough permits are free for them.
func TestStrictFIFOKeepsPermitsForTheHead(t *testing.T) {
	e := newEnv(t)
	const name = "fifo-head"
	holder := e.sem(e.client(), name, 4)
	big := e.sem(e.client(), name, 4)
	small := e.sem(e.client(), name, 4)
	h := mustAcquire(t, holder, e.ctx, 1)
	wBig := goAcquire(big, e.ctx, 4)
	e.waitQueued(holder, 1)

	if n := e.available(small); n != 3 {
		t.Fatalf("Available = %d, want 3", n)
	}
	if _, err := small.TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("TryAcquire(1) with 3 free and Acquire(4) queued: err = %v, want ErrNoPermits", err)
	}
	if _, _, err := small.Drain(e.ctx); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("Drain with 3 free and Acquire(4) queued: err = %v, want ErrNoPermits", err)
	}
	wSmall := goAcquire(small, e.ctx, 1)
	e.waitQueued(holder, 2)
	stillBlocked(t, wSmall, 300*time.Millisecond, "Acquire(1) queued behind Acquire(4)")

	mustRelease(t, holder, h)
	rb := receive(t, wBig, prompt, "Acquire(4)")
	stillBlocked(t, wSmall, 200*time.Millisecond, "Acquire(1) while Acquire(4) holds everything")
	mustRelease(t, big, rb.ctx)
	rs := receive(t, wSmall, prompt, "Acquire(1) after the large request released")
	mustRelease(t, small, rs.ctx)
}

// TestFIFOAcrossClients enqueues waiters one by one from three Clients and
// checks that they are served in that order.
func TestFIFOAcrossClients(t *testing.T) {
	e := newEnv(t)
	const (
		name    = "fifo"
		waiters = 9
	)
	var sems []*semaphore.Semaphore
	for range 3 {
		sems = append(sems, e.sem(e.client(), name, 1))
	}
	h := mustAcquire(t, sems[0], e.ctx, 1)

	var mu sync.Mutex
	var order []int
	done := make(chan error, waiters)
	for i := range waiters {
		s := sems[i%3]
		go func() {
			p, err := s.Acquire(e.ctx, 1)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			done <- s.Release(p)
		}()
		e.waitQueued(sems[0], int64(i+1))
	}
	mustRelease(t, sems[0], h)
	for range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
		case <-time.After(5 * time.Second):
			mu.Lock()
			t.Fatalf("waiters not all served after 5s; order so far %v", order)
		}
	}
	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Errorf("served in order %v, want arrival order %v", order, want)
	}
}

// TestBadInput checks argument validation and misuse: errors come at once,
// nothing is queued, and Redis is left unchanged.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	const name = "bad"
	s := e.sem(c, name, 3)
	type snap struct {
		hash map[string]string
		keys []string
	}
	snapshot := func() snap { return snap{e.hgetall(e.base(name)), e.keys()} }
	unchanged := func(what string, before snap) {
		t.Helper()
		after := snapshot()
		if !maps.Equal(after.hash, before.hash) {
			t.Errorf("%s changed the state hash: %v -> %v", what, before.hash, after.hash)
		}
		if !slices.Equal(after.keys, before.keys) {
			t.Errorf("%s changed the keys: %q -> %q", what, before.keys, after.keys)
		}
	}

	t.Run("permit count", func(t *testing.T) {
		before := snapshot()
		for _, n := range []int64{0, -1, semaphore.MaxPermits + 1} {
			if _, err := s.Acquire(e.ctx, n); !errors.Is(err, semaphore.ErrInvalidCount) {
				t.Errorf("Acquire(%d): err = %v, want ErrInvalidCount", n, err)
			}
			if _, err := s.TryAcquire(e.ctx, n); !errors.Is(err, semaphore.ErrInvalidCount) {
				t.Errorf("TryAcquire(%d): err = %v, want ErrInvalidCount", n, err)
			}
		}
		start := time.Now()
		if _, err := s.Acquire(e.ctx, 4); !errors.Is(err, semaphore.ErrExceedsLimit) {
			t.Errorf("Acquire(4) with limit 3: err = %v, want ErrExceedsLimit", err)
		}
		if _, err := s.TryAcquire(e.ctx, 4); !errors.Is(err, semaphore.ErrExceedsLimit) {
			t.Errorf("TryAcquire(4) with limit 3: err = %v, want ErrExceedsLimit", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("requests above the limit took %v to fail, want at once", d)
		}
		if st := e.state(s); st.Queued != 0 || st.Held != 0 {
			t.Errorf("state after bad counts = %s, want nothing held or queued", stateString(st))
		}
		unchanged("bad permit counts", before)
	})

	t.Run("limit", func(t *testing.T) {
		before := snapshot()
		for _, limit := range []int64{-1, semaphore.MaxPermits + 1} {
			if _, err := s.TrySetLimit(e.ctx, limit); !errors.Is(err, semaphore.ErrInvalidCount) {
				t.Errorf("TrySetLimit(%d): err = %v, want ErrInvalidCount", limit, err)
			}
			if err := s.SetLimit(e.ctx, limit); !errors.Is(err, semaphore.ErrInvalidCount) {
				t.Errorf("SetLimit(%d): err = %v, want ErrInvalidCount", limit, err)
			}
		}
		unchanged("bad limits", before)
		if n, err := s.Limit(e.ctx); err != nil || n != 3 {
			t.Errorf("Limit = %d, %v, want 3", n, err)
		}
		// TrySetLimit on a set limit changes nothing.
		if ok, err := s.TrySetLimit(e.ctx, 7); ok || err != nil {
			t.Errorf("TrySetLimit on a set limit = %v, %v, want false, nil", ok, err)
		}
		unchanged("TrySetLimit on a set limit", before)

		// A semaphore without a limit.
		fresh := semaphore.New(c, "no-limit")
		if _, err := fresh.Limit(e.ctx); !errors.Is(err, semaphore.ErrNoLimit) {
			t.Errorf("Limit without a limit: err = %v, want ErrNoLimit", err)
		}
		if _, err := fresh.Acquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoLimit) {
			t.Errorf("Acquire without a limit: err = %v, want ErrNoLimit", err)
		}
		if _, _, err := fresh.Drain(e.ctx); !errors.Is(err, semaphore.ErrNoLimit) {
			t.Errorf("Drain without a limit: err = %v, want ErrNoLimit", err)
		}
		for _, k := range e.keys() {
			if strings.Contains(k, "{no-limit}") {
				t.Errorf("calls on a semaphore without a limit created %s", k)
			}
		}
	})

	t.Run("name and client", func(t *testing.T) {
		before := e.keys()
		for _, bad := range []string{"", "a{b}", "a}", strings.Repeat("x", 1025), "tab\there", "\xff"} {
			bs := semaphore.New(c, bad)
			if _, err := bs.TrySetLimit(e.ctx, 1); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Errorf("TrySetLimit on name %.20q: err = %v, want ErrInvalidName", bad, err)
			}
			if _, err := bs.Acquire(e.ctx, 1); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Errorf("Acquire on name %.20q: err = %v, want ErrInvalidName", bad, err)
			}
			if _, err := bs.State(e.ctx); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Errorf("State on name %.20q: err = %v, want ErrInvalidName", bad, err)
			}
			if err := bs.Release(e.ctx); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Errorf("Release on name %.20q: err = %v, want ErrInvalidName", bad, err)
			}
			if _, err := semaphore.NewLock(c, bad).TryLock(e.ctx); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Errorf("TryLock on name %.20q: err = %v, want ErrInvalidName", bad, err)
			}
		}
		var typedNil *rlock.Client
		for what, nc := range map[string]*rlock.Client{"nil": nil, "typed nil": typedNil} {
			bs := semaphore.New(nc, "x")
			if _, err := bs.TrySetLimit(e.ctx, 1); !errors.Is(err, semaphore.ErrInvalidClient) {
				t.Errorf("TrySetLimit with %s client: err = %v, want ErrInvalidClient", what, err)
			}
			if _, err := bs.Acquire(e.ctx, 1); !errors.Is(err, semaphore.ErrInvalidClient) {
				t.Errorf("Acquire with %s client: err = %v, want ErrInvalidClient", what, err)
			}
			if _, _, err := bs.Drain(e.ctx); !errors.Is(err, semaphore.ErrInvalidClient) {
				t.Errorf("Drain with %s client: err = %v, want ErrInvalidClient", what, err)
			}
			if err := bs.Release(e.ctx); !errors.Is(err, semaphore.ErrInvalidClient) {
				t.Errorf("Release with %s client: err = %v, want ErrInvalidClient", what, err)
			}
			if n := bs.Permits(e.ctx); n != 0 {
				t.Errorf("Permits with %s client = %d", what, n)
			}
			if _, err := semaphore.NewLock(nc, "x").Lock(e.ctx); !errors.Is(err, semaphore.ErrInvalidClient) {
				t.Errorf("Lock with %s client: err = %v, want ErrInvalidClient", what, err)
			}
		}
		if after := e.keys(); !slices.Equal(before, after) {
			t.Errorf("bad names or clients changed Redis: keys %q -> %q", before, after)
		}
	})

	t.Run("options", func(t *testing.T) {
		before := snapshot()
		for what, opt := range map[string]semaphore.AcquireOption{
			"WithLease(0)":         semaphore.WithLease(0),
			"WithLease(-1s)":       semaphore.WithLease(-time.Second),
			"WithLease(500µs)":     semaphore.WithLease(500 * time.Microsecond),
			"WithWaitTimeout(-1s)": semaphore.WithWaitTimeout(-time.Second),
		} {
			if _, err := s.Acquire(e.ctx, 1, opt); !errors.Is(err, semaphore.ErrInvalidLease) {
				t.Errorf("Acquire with %s: err = %v, want ErrInvalidLease", what, err)
			}
			if _, err := s.TryAcquire(e.ctx, 1, opt); !errors.Is(err, semaphore.ErrInvalidLease) {
				t.Errorf("TryAcquire with %s: err = %v, want ErrInvalidLease", what, err)
			}
			if _, _, err := s.Drain(e.ctx, opt); !errors.Is(err, semaphore.ErrInvalidLease) {
				t.Errorf("Drain with %s: err = %v, want ErrInvalidLease", what, err)
			}
		}
		unchanged("bad options", before)
		// A nil option is ignored.
		p, err := s.TryAcquire(e.ctx, 1, nil)
		if err != nil {
			t.Fatalf("TryAcquire with a nil option: %v", err)
		}
		mustRelease(t, s, p)
	})

	t.Run("release misuse", func(t *testing.T) {
		other := e.sem(c, "other", 3)
		sameNameOtherClient := e.sem(e.client(), name, 3)
		p := mustAcquire(t, s, e.ctx, 2)
		q := mustAcquire(t, other, e.ctx, 1)
		before := snapshot()
		var nilCtx context.Context
		for what, err := range map[string]error{
			"context.Background()":            s.Release(context.Background()),
			"nil context":                     s.Release(nilCtx),
			"a permit of another semaphore":   s.Release(q),
			"the same name on another Client": sameNameOtherClient.Release(p),
		} {
			if !errors.Is(err, semaphore.ErrNotHeld) {
				t.Errorf("Release with %s: err = %v, want ErrNotHeld", what, err)
			}
		}
		unchanged("misplaced releases", before)
		if s.Permits(p) != 2 || other.Permits(q) != 1 || p.Err() != nil || q.Err() != nil {
			t.Errorf("misplaced releases touched the permits: %d (ctx %v), %d (ctx %v)", s.Permits(p), p.Err(), other.Permits(q), q.Err())
		}
		if s.Permits(q) != 0 || other.Permits(p) != 0 || sameNameOtherClient.Permits(p) != 0 {
			t.Errorf("Permits counts another semaphore's or Client's permit")
		}

		mustRelease(t, s, p)
		if err := s.Release(p); !errors.Is(err, semaphore.ErrNotHeld) || errors.Is(err, semaphore.ErrLeaseLost) {
			t.Errorf("second Release: err = %v, want ErrNotHeld (not ErrLeaseLost)", err)
		}
		if n := s.Permits(p); n != 0 {
			t.Errorf("Permits after Release = %d, want 0", n)
		}
		if n := e.available(s); n != 3 {
			t.Errorf("Available after release and double release = %d, want 3", n)
		}
		mustRelease(t, other, q)
	})
}

// TestReleaseIsIdempotentUnderRetry replays a release request the way Release
// retries one whose reply was lost: the permits are counted back once, even
// when someone else took them in between.
func TestReleaseIsIdempotentUnderRetry(t *testing.T) {
	e := newEnv(t)
	const name = "retry"
	s := e.sem(e.client(), name, 3)
	other := e.sem(e.client(), name, 3)

	p := mustAcquire(t, s, e.ctx, 2)
	const requestID = "request-1"
	// The first attempt reaches Redis, its reply is lost.
	n, err := semaphore.ReleaseScript(e.ctx, s, p, requestID, false)
	if err != nil || n != 2 {
		t.Fatalf("first attempt = %d, %v, want 2", n, err)
	}
	if got := e.available(s); got != 3 {
		t.Fatalf("Available after the first attempt = %d, want 3", got)
	}
	// Someone takes the permits meanwhile.
	q := mustAcquire(t, other, e.ctx, 3)
	// The retry, under the same request id, succeeds without releasing theirs.
	if err := semaphore.ReleaseWithRequestID(s, p, requestID); err != nil {
		t.Fatalf("retried release: %v, want nil", err)
	}
	if cause := context.Cause(p); !errors.Is(cause, semaphore.ErrReleased) {
		t.Errorf("permit context cause after the retried release = %v, want ErrReleased", cause)
	}
	if st := e.state(s); st.Held != 3 {
		t.Errorf("state after the retried release = %s, want the other holder's 3 still held", stateString(st))
	}
	if got := other.Permits(q); got != 3 || q.Err() != nil {
		t.Errorf("the other holder's permits = %d (ctx %v), want 3", got, q.Err())
	}
	// The same request again only answers from its latch.
	if n, err := semaphore.ReleaseScript(e.ctx, s, p, requestID, true); err != nil || n != 2 {
		t.Errorf("third attempt of the same request = %d, %v, want 2 from the latch", n, err)
	}
	// A new request for the released permit changes nothing either.
	if n, err := semaphore.ReleaseScript(e.ctx, s, p, "request-2", false); err != nil || n >= 0 {
		t.Errorf("a new release request for a released permit = %d, %v, want a negative answer", n, err)
	}
	if st := e.state(s); st.Held != 3 {
		t.Errorf("state after the replays = %s, want Held 3", stateString(st))
	}
	// The client side refuses a second release outright.
	if err := semaphore.ReleaseWithRequestID(s, p, requestID); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Errorf("release of an ended hold: err = %v, want ErrNotHeld", err)
	}
	mustRelease(t, other, q)
	if got := e.available(s); got != 3 {
		t.Errorf("Available at the end = %d, want 3", got)
	}
}

// TestDrain takes every free permit as one lease.
func TestDrain(t *testing.T) {
	e := newEnv(t)
	const name = "drain"
	s := e.sem(e.client(), name, 5)
	other := e.sem(e.client(), name, 5)
	p := mustAcquire(t, other, e.ctx, 2)

	d, n, err := s.Drain(e.ctx)
	if err != nil || n != 3 {
		t.Fatalf("Drain with 2 of 5 held = %d, %v, want 3", n, err)
	}
	if got := s.Permits(d); got != 3 {
		t.Errorf("Permits of the drain context = %d, want 3", got)
	}
	if got := e.available(s); got != 0 {
		t.Errorf("Available after Drain = %d, want 0", got)
	}
	if _, _, err := s.Drain(e.ctx); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("Drain with none free: err = %v, want ErrNoPermits", err)
	}
	if _, _, err := other.Drain(e.ctx); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("Drain from another Client with none free: err = %v, want ErrNoPermits", err)
	}
	mustRelease(t, s, d)
	if got := e.available(s); got != 3 {
		t.Errorf("Available after releasing the drain = %d, want 3 (the drain gave back 3)", got)
	}
	mustRelease(t, other, p)

	// A drain with a fixed lease gives everything back when the lease ends.
	d, n, err = s.Drain(e.ctx, semaphore.WithLease(300*time.Millisecond))
	if err != nil || n != 5 {
		t.Fatalf("Drain with a lease = %d, %v, want 5", n, err)
	}
	waitDone(t, d, 3*time.Second, "drain with a 300ms lease")
	if cause := context.Cause(d); !errors.Is(cause, semaphore.ErrLeaseLost) {
		t.Errorf("drain context cause = %v, want ErrLeaseLost", cause)
	}
	e.waitState(s, 3*time.Second, "the drained permits back", func(st semaphore.State) bool { return st.Held == 0 })
	if err := s.Release(d); !errors.Is(err, semaphore.ErrNotHeld) || !errors.Is(err, semaphore.ErrLeaseLost) {
		t.Errorf("Release of an expired drain: err = %v, want ErrNotHeld and ErrLeaseLost", err)
	}
}

// TestLock checks the one-permit lock: not reentrant, unlockable, mutually
// exclusive across Clients, and refused on a semaphore with another limit.
func TestLock(t *testing.T) {
	e := newEnv(t)
	const name = "lock"
	c1, c2 := e.client(), e.client()
	l := semaphore.NewLock(c1, name)

	lockCtx, err := l.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if n, err := l.Semaphore().Limit(e.ctx); err != nil || n != 1 {
		t.Errorf("limit of the lock's semaphore = %d, %v, want 1", n, err)
	}
	if _, err := l.TryLock(lockCtx); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("TryLock with the lock context itself: err = %v, want ErrNoPermits (not reentrant)", err)
	}
	if _, err := l.Lock(lockCtx, semaphore.WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, semaphore.ErrNoPermits) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with the lock context itself: err = %v, want ErrNoPermits and DeadlineExceeded", err)
	}
	if _, err := semaphore.NewLock(c2, name).TryLock(e.ctx); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("TryLock from another Client: err = %v, want ErrNoPermits", err)
	}
	if err := l.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Unlock(lockCtx); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Errorf("second Unlock: err = %v, want ErrNotHeld", err)
	}

	// Mutual exclusion: a read-modify-write that loses updates on overlap.
	const iterations = 15
	var inside, overlaps, counter atomic.Int64
	var wg sync.WaitGroup
	for _, c := range []*rlock.Client{c1, c2} {
		for range 4 {
			wg.Go(func() {
				l := semaphore.NewLock(c, name)
				for i := range iterations {
					lockCtx, err := l.Lock(e.ctx)
					if err != nil {
						t.Errorf("Lock (iteration %d): %v", i, err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter.Load()
					runtime.Gosched()
					counter.Store(v + 1)
					inside.Add(-1)
					if err := l.Unlock(lockCtx); err != nil {
						t.Errorf("Unlock (iteration %d): %v", i, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times a goroutine entered the critical section while another was inside", n)
	}
	if got, want := counter.Load(), int64(2*4*iterations); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}

	// A semaphore with another limit is not a lock.
	s3 := e.sem(c1, "three", 3)
	l3 := semaphore.NewLock(c2, "three")
	if _, err := l3.Lock(e.ctx); !errors.Is(err, semaphore.ErrExceedsLimit) {
		t.Errorf("Lock on a semaphore with limit 3: err = %v, want ErrExceedsLimit", err)
	}
	if _, err := l3.TryLock(e.ctx); !errors.Is(err, semaphore.ErrExceedsLimit) {
		t.Errorf("TryLock on a semaphore with limit 3: err = %v, want ErrExceedsLimit", err)
	}
	if st := e.state(s3); st != (semaphore.State{Limit: 3}) {
		t.Errorf("state of the limit-3 semaphore = %s, want untouched", stateString(st))
	}
}

// moduleGoroutines returns the stacks of the goroutines, other than the
// caller, running code of this module (waiters, clean-ups, watchdogs, pub/sub
// connections), leaving out rueidis's connection goroutines, which come and go
// with its connections, and the test servers' process reapers.
func moduleGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, st := range strings.Split(strings.TrimSpace(string(buf)), "\n\n")[1:] {
		if strings.Contains(st, "github.com/relockio/relock/") && !strings.Contains(st, "internal/redistest") {
			out = append(out, st)
		}
	}
	return out
}
