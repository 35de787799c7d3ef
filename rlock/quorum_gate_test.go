package rlock_test

// Tests of the quorum lock's gate (rlock/quorum_gate.go): contenders meet at
// one master, in line, instead of splitting the votes of all of them.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// Contenders of three Quorums meet at the gate: an acquisition costs its
// winner's asks and releases and one ask per woken waiter, not the split
// votes of every contender on every master (32.5 scripts per acquisition
// at e091fae in this test, 14 since).
func TestQuorumContendersMeetAtTheGate(t *testing.T) {
	e := qNewEnv(t, 5)
	const quorums, workers, rounds = 3, 3, 8
	all := []int{0, 1, 2, 3, 4}
	ms := e.mutexes(quorums, "meet", rlock.QuorumOptions{})
	before := e.scripts(all...)
	e.contend(e.ctx, ms, workers, rounds, nil, nil)
	per := float64(e.scripts(all...)-before) / (quorums * workers * rounds)
	t.Logf("%.1f scripts per acquisition", per)
	if per > 22 {
		t.Errorf("%.1f scripts per acquisition: the contenders split the masters' votes", per)
	}
	e.eventually(10*time.Second, "every key of the lock gone", func() bool { return count(e.held("meet")) == 0 })
	e.allExpire(all...)
}

// contend has workers goroutines per lock in ms take it rounds times each,
// and fails the test on an error (but an Unlock error unlockOK accepts) or
// on two holders at once. held, if not nil, runs inside every hold with the
// number of holds so far.
func (e *qEnv) contend(ctx context.Context, ms []*rlock.QuorumMutex, workers, rounds int, held func(n int64), unlockOK func(error) bool) {
	e.t.Helper()
	var done, inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ms)*workers)
	for _, m := range ms {
		for range workers {
			wg.Go(func() {
				for range rounds {
					lockCtx, err := m.Lock(ctx)
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					if n := done.Add(1); held != nil {
						held(n)
					}
					inside.Add(-1)
					if err := m.Unlock(lockCtx); err != nil && (unlockOK == nil || !unlockOK(err)) {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	if n := overlaps.Load(); n > 0 {
		e.t.Fatalf("%d acquisitions overlapped another", n)
	}
}

// mutexes returns the lock called name of n Quorums of its own over e's
// masters, each with opts.
func (e *qEnv) mutexes(n int, name string, opts rlock.QuorumOptions) []*rlock.QuorumMutex {
	var ms []*rlock.QuorumMutex
	for range n {
		ms = append(ms, e.quorum(opts).Mutex(name))
	}
	return ms
}

// lockAndUnlock runs m.Lock then m.Unlock in the background and sends the
// first error (or nil) on the channel it returns.
func (e *qEnv) lockAndUnlock(m *rlock.QuorumMutex) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := m.Lock(e.ctx)
		if err == nil {
			err = m.Unlock(l)
		}
		got <- err
	}()
	return got
}

// fakeHold makes owner (a field with ':', as a quorum owner's) hold the lock
// called name on master i for ttl, as a holder that vanished would.
func (e *qEnv) fakeHold(i int, name, owner string, ttl time.Duration) {
	e.t.Helper()
	rc, key := e.raws[i], e.lockKey(name)
	if err := rc.Do(e.ctx, rc.B().Hset().Key(key).FieldValue().FieldValue(owner, "1").Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
	if err := rc.Do(e.ctx, rc.B().Pexpire().Key(key).Milliseconds(ttl.Milliseconds()).Build()).Error(); err != nil {
		e.t.Fatal(err)
	}
}

// await fails the test unless got yields nil within 10s; late says what
// running out of time means.
func (e *qEnv) await(got <-chan error, late string) {
	e.t.Helper()
	select {
	case err := <-got:
		if err != nil {
			e.t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		e.t.Fatal(late)
	}
}

// inLine reports whether master i keeps a place in line for the lock called
// name (its gate's reservation key exists).
func (e *qEnv) inLine(i int, name string) bool {
	n, err := e.raws[i].Do(e.ctx, e.raws[i].B().Exists().Key(e.lockKey(name)+":gate").Build()).AsInt64()
	return err == nil && n == 1
}

// A holder that releases and at once asks again does not pass a waiter that
// was already in line at the gate.
func TestQuorumReleaserDoesNotPassWaiter(t *testing.T) {
	e := qNewEnv(t, 5)
	a := e.quorum(rlock.QuorumOptions{}).Mutex("line")
	b := e.quorum(rlock.QuorumOptions{}).Mutex("line")
	gate := rlock.QuorumGate(a)
	for i := range 3 {
		held, err := a.Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan string, 1)
		bDone := make(chan error, 1)
		go func() {
			l, err := b.Lock(e.ctx)
			if err == nil {
				order <- "b"
				err = b.Unlock(l)
			}
			bDone <- err
		}()
		e.eventually(10*time.Second, "the waiter in line at the gate", func() bool { return e.inLine(gate, "line") })
		if err := a.Unlock(held); err != nil {
			t.Fatal(err)
		}
		again, err := a.Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var first string
		select {
		case first = <-order: // the waiter's, if it held the lock before this Lock returned
		default:
		}
		if err := a.Unlock(again); err != nil {
			t.Fatal(err)
		}
		if err := <-bDone; err != nil {
			t.Fatal(err)
		}
		if first != "b" {
			t.Fatalf("round %d: the releaser took the lock again before the waiter in line", i)
		}
	}
}

// A place in line whose caller vanished (no Lock call asks under it any
// more) holds a free lock up for the claim window at most, counted from when
// another caller finds the lock free. That caller wakes the reserved one,
// once (it may not be the one a release woke in its process).
func TestQuorumVanishedPlaceLapses(t *testing.T) {
	e := qNewEnv(t, 5)
	const claim = 400 * time.Millisecond
	m := e.quorum(rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithClaimWindow(claim)}}).Mutex("vanished")
	gate := rlock.QuorumGate(m)
	rc := e.raws[gate]
	var wakeReserved atomic.Int64
	sub, closeSub := redistest.Client(t, e.srvs[gate]).Dedicate()
	t.Cleanup(closeSub)
	sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		if m.Message == "@gone:1" {
			wakeReserved.Add(1)
		}
	}})
	if err := sub.Do(e.ctx, sub.B().Subscribe().Channel(e.lockKey("vanished")+":unlock").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Do(e.ctx, rc.B().Set().Key(e.lockKey("vanished")+":gate").Value("1 gone:1").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	t.Logf("Lock took %v behind a vanished place (claim window %v)", took, claim)
	if took < claim/2 {
		t.Errorf("Lock took %v: the vanished caller's place was not kept for it", took)
	}
	if took > 10*claim {
		t.Errorf("Lock took %v: the vanished caller's place held the lock up past its claim window %v", took, claim)
	}
	e.eventually(10*time.Second, "the reserved caller woken", func() bool { return wakeReserved.Load() >= 1 })
	if n := wakeReserved.Load(); n != 1 {
		t.Errorf("the reserved caller woken %d times for one free lock kept for it, want once", n)
	}
	e.allExpire(0, 1, 2, 3, 4)
}

// A Lock call that ends without the lock (its wait timed out) gives up its
// place, so the next caller does not wait for the claim window (3s) in its
// stead.
func TestQuorumTimedOutWaiterLeavesLine(t *testing.T) {
	e := qNewEnv(t, 5)
	holder := e.quorum(rlock.QuorumOptions{}).Mutex("leave")
	waiter := e.quorum(rlock.QuorumOptions{}).Mutex("leave")
	next := e.quorum(rlock.QuorumOptions{}).Mutex("leave")
	gate := rlock.QuorumGate(holder)
	held, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	timedOut := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(e.ctx, rlock.WithWaitTimeout(2*time.Second))
		timedOut <- err
	}()
	e.eventually(10*time.Second, "the waiter in line", func() bool { return e.inLine(gate, "leave") })
	if err := <-timedOut; err == nil {
		t.Fatal("Lock of a held lock returned without error")
	}
	e.eventually(1500*time.Millisecond, "the timed-out waiter's place gone (it would last the lease and the claim window, 5s)", func() bool { return !e.inLine(gate, "leave") })
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := next.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > rlock.DefaultClaimWindow/2 {
		t.Errorf("the next Lock took %v: it waited for the timed-out caller's place", took)
	}
	if err := next.Unlock(l); err != nil {
		t.Fatal(err)
	}
}

// A contender that took the gate and vanished before it took a majority
// (here: a hold on the gate master only) holds the others up for a few
// attempt timeouts, not for its lease: a waiter that hears no release looks
// at every master and takes the majority the gate's holder never had.
func TestQuorumGateOnlyHolderStallsBriefly(t *testing.T) {
	e := qNewEnv(t, 5)
	const attempt = 50 * time.Millisecond
	m := e.quorum(rlock.QuorumOptions{AttemptTimeout: attempt}).Mutex("stall")
	gate := rlock.QuorumGate(m)
	e.fakeHold(gate, "stall", "gone:1", time.Minute)
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock behind a gate-only holder: %v", err)
	}
	took := time.Since(start)
	t.Logf("Lock took %v behind a gate-only holder (attempt timeout %v)", took, attempt)
	if err := m.Unlock(l); err != nil {
		t.Fatal(err)
	}
	if took > 3*time.Second {
		t.Errorf("Lock took %v behind a gate-only holder: want a few attempt timeouts (%v), not its lease", took, attempt)
	}
}

// A gate master that does not answer is passed over, by every lock of the
// Quorum for a second: contenders then meet at the next master, where the
// waiter's place in line is kept.
func TestQuorumHungGatePassedOver(t *testing.T) {
	e := qNewEnv(t, 5)
	q := e.quorum(rlock.QuorumOptions{AttemptTimeout: 300 * time.Millisecond})
	holder, waiter := q.Mutex("hung"), q.Mutex("hung")
	gate := rlock.QuorumGate(holder)
	next := (gate + 1) % 5
	if err := e.srvs[gate].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.srvs[gate].Resume() })
	held, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := e.lockAndUnlock(waiter)
	e.eventually(10*time.Second, "the waiter in line at the next master", func() bool { return e.inLine(next, "hung") })
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// The gate master dies (or hangs) while contenders wait in line there: they
// meet at the next master and every acquisition still completes, one holder
// at a time.
func TestQuorumGateFailsUnderContention(t *testing.T) {
	for _, fault := range []string{"kill", "pause"} {
		t.Run(fault, func(t *testing.T) {
			e := qNewEnv(t, 5)
			const quorums, workers, rounds = 3, 2, 8
			ms := e.mutexes(quorums, "failing", rlock.QuorumOptions{AttemptTimeout: 50 * time.Millisecond})
			gate := rlock.QuorumGate(ms[0])
			var faulted atomic.Bool
			ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
			defer cancel()
			// A hold whose bare majority included the killed (or paused) gate
			// cannot be released on a majority: Unlock says it was given up.
			abandoned := func(err error) bool {
				var ae *rlock.AbandonError
				return errors.As(err, &ae)
			}
			e.contend(ctx, ms, workers, rounds, func(n int64) {
				if n != quorums*workers*rounds/4 {
					return
				}
				var err error
				if fault == "kill" {
					err = e.srvs[gate].Kill()
				} else {
					err = e.srvs[gate].Pause()
					t.Cleanup(func() { _ = e.srvs[gate].Resume() })
				}
				if err != nil {
					t.Error(err)
				}
				faulted.Store(true)
			}, abandoned)
			if !faulted.Load() {
				t.Fatal("the fault was never injected")
			}
		})
	}
}

// A round that took the gate but found the other masters still held (here by
// an owner whose releases "arrive" only once the gate is taken, as the last
// holder's may when it released the gate first) asks them again and takes
// the lock, rather than giving the gate back and sleeping until that
// owner's leases end.
func TestQuorumGateWinnerChasesReleasesInFlight(t *testing.T) {
	e := qNewEnv(t, 5)
	// A chase lasts up to the attempt timeout (and a quarter of the lease).
	m := e.quorum(rlock.QuorumOptions{AttemptTimeout: 1500 * time.Millisecond,
		ClientOptions: []rlock.Option{rlock.WithWatchdogTimeout(6 * time.Second)}}).Mutex("chase")
	gate := rlock.QuorumGate(m)
	key := e.lockKey("chase")
	var others []int
	for i := range 5 {
		if i != gate {
			others = append(others, i)
		}
	}
	for _, i := range others[:3] {
		e.fakeHold(i, "chase", "last:1", time.Minute)
	}
	got := e.lockAndUnlock(m)
	// A round holds the gate for a moment; one that chases holds it for up
	// to 1.5s.
	var since time.Time
	e.eventually(10*time.Second, "the gate held by the Lock for 200ms", func() bool {
		if !e.held("chase")[gate] {
			since = time.Time{}
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= 200*time.Millisecond
	})
	for _, i := range others[:3] {
		if err := e.raws[i].Do(e.ctx, e.raws[i].B().Del().Key(key).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	e.await(got, "Lock still waiting 10s after the other masters were released")
}

// The gate master dies while a waiter sleeps behind a holder it knows holds
// a majority: the holder's release reaches the other masters only, and the
// waiter, hearing them and not the gate, looks again (at the next master)
// instead of sleeping out the holder's lease.
func TestQuorumGateDiesWhileWaiterSleeps(t *testing.T) {
	e := qNewEnv(t, 5)
	holder := e.quorum(rlock.QuorumOptions{}).Mutex("dies")
	waiter := e.quorum(rlock.QuorumOptions{}).Mutex("dies")
	gate := rlock.QuorumGate(holder)
	var others []int
	for i := range 5 {
		if i != gate {
			others = append(others, i)
		}
	}
	held, err := holder.Lock(e.ctx, rlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := e.scripts(others...)
	got := e.lockAndUnlock(waiter)
	// In line at the gate, then a full round (every master asked) tells the
	// waiter that the holder has a majority. A message on another master's
	// channel (anyone may publish one) has it ask the gate again, lose to
	// that holder, and sleep on its lease, listening for the gate.
	e.eventually(10*time.Second, "the waiter's full round", func() bool { return e.scripts(others...)-before >= 4 })
	atGate := e.scripts(gate)
	rc := e.raws[others[0]]
	if err := rc.Do(e.ctx, rc.B().Publish().Channel(e.lockKey("dies")+":unlock").Message("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the waiter's ask at the gate", func() bool { return e.scripts(gate) > atGate })
	if err := e.srvs[gate].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := holder.Unlock(held); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the waiter held the lock %v after the release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter slept on through the release (the holder's lease is 30s)")
	}
}

// A holder that took the gate and vanished (a hold on the gate master only,
// for a minute) does not make every hand-off behind it wait for the stall
// bound: once a full round saw it hold no majority, rounds look at every
// master while it holds the gate.
func TestQuorumGateOnlyHolderUnderContention(t *testing.T) {
	e := qNewEnv(t, 5)
	const quorums, workers, rounds = 3, 3, 6
	ms := e.mutexes(quorums, "stuck", rlock.QuorumOptions{})
	gate := rlock.QuorumGate(ms[0])
	e.fakeHold(gate, "stuck", "gone:1", time.Minute)
	start := time.Now()
	e.contend(e.ctx, ms, workers, rounds, nil, nil)
	took := time.Since(start)
	t.Logf("%d acquisitions behind a gate-only holder in %v", quorums*workers*rounds, took)
	// One stall bound (500ms) per hand-off would be 27s.
	if took > 12*time.Second {
		t.Errorf("%d acquisitions took %v behind a gate-only holder", quorums*workers*rounds, took)
	}
}
