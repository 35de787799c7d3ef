package rlock_test

// Tests of the direct hand-off: a release hands a free lock to the head of the
// Redis-side queue in the same script, and the woken waiter holds it without a
// further round trip.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// The release hands the lock to the queued waiter: when Unlock returns the
// waiter already owns it in Redis, with the next fencing token, and its Lock
// returns without running another script.
func TestHandoffInRelease(t *testing.T) {
	e := ftNewEnv(t)
	const name = "handoff"
	holder, waiter := e.client(), e.client()
	e.warmUp(holder, waiter)
	hold, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := holder.Mutex(name).Token(hold)

	type result struct {
		lc  context.Context
		err error
	}
	got := make(chan result, 1)
	go func() {
		lc, err := waiter.Mutex(name).Lock(e.ctx)
		got <- result{lc, err}
	}()
	e.queuedIs(1)
	e.quiet()
	before := e.scripts()
	if err := holder.Mutex(name).Unlock(hold); err != nil {
		t.Fatal(err)
	}
	owners, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey(name)).Build()))
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 || !strings.HasPrefix(owners[0], waiter.ID()+":") {
		t.Fatalf("after the release the lock is held by %q, want the waiter of Client %s", owners, waiter.ID())
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := e.scripts() - before; n != 1 {
		t.Errorf("%d scripts ran from the release to the waiter's Lock returning, want 1 (the release)", n)
	}
	m := waiter.Mutex(name)
	fence, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(e.lockKey(name)+":fence").Build()).AsUint64()
	if err != nil {
		t.Fatal(err)
	}
	// The hand-off reserved the block that ends at the counter.
	if tok, _ := m.Token(r.lc); tok <= token || tok != fence-rlock.TokenBlock+1 {
		t.Errorf("handed-off hold has token %d, want above %d, the first of the block that ends at the counter %d", tok, token, fence)
	}
	if n, err := m.HoldCount(r.lc); err != nil || n != 1 {
		t.Errorf("HoldCount = %d, %v; want 1", n, err)
	}
	// The grant runs for the claim window until the waiter's Client extends
	// it to the watchdog's lease (see TestClaimExtended).
	if ttl, err := m.TTL(e.ctx); err != nil || ttl <= 0 || ttl > rlock.DefaultClaimWindow {
		t.Errorf("TTL = %v, %v; want at most the claim window (%v)", ttl, err, rlock.DefaultClaimWindow)
	}
	// Re-entry and the final Unlock work on a handed-off hold as on any other.
	inner, err := m.Lock(r.lc)
	if err != nil {
		t.Fatal(err)
	}
	mustUnlockFT(t, m, inner)
	mustUnlockFT(t, m, r.lc)
	if e.exists(e.lockKey(name)) {
		t.Fatal("lock still held after the final Unlock")
	}
}

func mustUnlockFT(t *testing.T, m *rlock.Mutex, lc context.Context) {
	t.Helper()
	if err := m.Unlock(lc); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// Waiters that give up at random moments (some just as the lock is handed to
// them; not much sooner: a deadline that cuts rueidis commands short closes
// connections, and a client whose redials keep being cut short stalls, which
// is not what this test is about) never stall the queue: the lock keeps changing hands between the
// others, holders never overlap, fencing tokens rise strictly from holder to
// holder, and at the end the lock is free at once (not after a 30s lease
// handed to a waiter that left) with nothing left queued.
func TestHandoffCancelledWaitersNeverStall(t *testing.T) {
	e := ftNewEnv(t)
	const name = "churn"
	clients := []*rlock.Client{e.client(), e.client(), e.client()}
	for _, c := range clients { // connect first
		lc, err := c.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustUnlockFT(t, c.Mutex(name), lc)
	}
	var (
		wg       sync.WaitGroup
		inside   atomic.Int32
		overlap  atomic.Int32
		acquired atomic.Int32
		mu       sync.Mutex
		last     uint64
		badToken []uint64
	)
	// Four goroutines per Client: cohorts form, and waiters give up while
	// waiting behind a local holder, while queued for their Client, and just
	// as a release names them their Client's successor.
	for i := range 12 {
		c := clients[i%len(clients)]
		wg.Go(func() {
			m := c.Mutex(name)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for range 20 {
				ctx, cancel := context.WithTimeout(e.ctx, time.Duration(3000+rng.IntN(7000))*time.Microsecond)
				lc, err := m.Lock(ctx)
				if err != nil {
					cancel()
					// A wait cut short, or its first attempt (then the error
					// may be the connection's own timeout).
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Lock: %v", err)
						return
					}
					continue
				}
				if inside.Add(1) > 1 {
					overlap.Add(1)
				}
				tok, _ := m.Token(lc)
				mu.Lock()
				if tok <= last {
					badToken = append(badToken, tok)
				}
				last = tok
				mu.Unlock()
				acquired.Add(1)
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // the critical section
				inside.Add(-1)
				if err := m.Unlock(lc); err != nil {
					t.Errorf("Unlock: %v", err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if n := overlap.Load(); n > 0 {
		t.Errorf("holders overlapped %d time(s)", n)
	}
	if len(badToken) > 0 {
		t.Errorf("fencing tokens did not rise strictly: %v after a higher one", badToken)
	}
	t.Logf("%d acquisitions", acquired.Load())
	// Abandons of the waiters that left run in the background: the lock
	// must be free (or handed on and released) well within a second.
	lc, err := e.client().Mutex(name).Lock(e.ctx, rlock.WithWaitTimeout(5*time.Second))
	if err != nil {
		h, _ := e.raw.Do(e.ctx, e.raw.B().Hgetall().Key(e.lockKey(name)).Build()).AsStrMap()
		pttl, _ := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(e.lockKey(name)).Build()).AsInt64()
		t.Fatalf("lock stalled after the churn: %v; held by %v for %dms more; queued: %q (clients %s, %s, %s)",
			err, h, pttl, e.sortedSetMembers(), clients[0].ID(), clients[1].ID(), clients[2].ID())
	}
	_ = lc
	e.eventually(ftPatience, "no waiter left queued", func() bool { return len(e.sortedSetMembers()) == 0 })
}

// Goroutines of one Client pass the lock among themselves without Redis
// (cohorting), within a budget: holders never overlap, re-entry and HoldCount
// work on a passed hold, fencing tokens rise strictly in acquisition order
// across both Clients, most acquisitions cost no script, and a waiter of
// another Client is not starved.
func TestCohortPassesLocally(t *testing.T) {
	e := ftNewEnv(t)
	const name = "cohort"
	x, y := e.client(), e.client()
	e.warmUp(x, y)
	var (
		wg       sync.WaitGroup
		inside   atomic.Int32
		overlap  atomic.Int32
		acquired atomic.Int32
		mu       sync.Mutex
		tokens   []uint64
		maxWaitY time.Duration
	)
	run := func(c *rlock.Client, n int, isY bool) {
		m := c.Mutex(name)
		for range n {
			start := time.Now()
			lc, err := m.Lock(e.ctx)
			if err != nil {
				t.Errorf("Lock: %v", err)
				return
			}
			waited := time.Since(start)
			if inside.Add(1) > 1 {
				overlap.Add(1)
			}
			tok, _ := m.Token(lc)
			mu.Lock()
			tokens = append(tokens, tok)
			if isY {
				maxWaitY = max(maxWaitY, waited)
			}
			mu.Unlock()
			inner, err := m.Lock(lc)
			if err != nil {
				t.Errorf("re-entry: %v", err)
				return
			}
			if n, err := m.HoldCount(inner); err != nil || n != 2 {
				t.Errorf("HoldCount after re-entry = %d, %v; want 2", n, err)
			}
			if tok2, _ := m.Token(inner); tok2 != tok {
				t.Errorf("re-entry changed the token from %d to %d", tok, tok2)
			}
			mustUnlockFT(t, m, inner)
			acquired.Add(1)
			inside.Add(-1)
			mustUnlockFT(t, m, lc)
			if n, err := m.HoldCount(lc); err != nil || n != 0 {
				t.Errorf("HoldCount after the final Unlock = %d, %v; want 0", n, err)
			}
		}
	}
	before := e.scripts()
	for range 4 {
		wg.Go(func() { run(x, 20, false) })
	}
	wg.Go(func() { run(y, 10, true) })
	wg.Wait()
	spent := e.scripts() - before
	if n := overlap.Load(); n > 0 {
		t.Errorf("holders overlapped %d time(s)", n)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token #%d = %d after %d: not rising strictly", i, tokens[i], tokens[i-1])
		}
	}
	n := int64(acquired.Load())
	// Each acquisition re-enters once (re-entry, HoldCount and inner unlock
	// are 2 scripts and a HGET): count the first-level work only.
	perAcq := float64(spent-2*n) / float64(n)
	t.Logf("%d acquisitions, %.2f scripts each besides the re-entry; longest wait of the other Client %v", n, perAcq, maxWaitY)
	if perAcq >= 1 {
		t.Errorf("%.2f scripts per acquisition: the lock is not passed on locally", perAcq)
	}
	if maxWaitY > 5*time.Second {
		t.Errorf("the other Client's waiter waited %v: starved", maxWaitY)
	}
}

// A Client's goroutines queue in Redis as one: at no time is more than one
// owner of a Client queued, Clients take turns in arrival order (every
// goroutine is served, none waits for long), holders never overlap, and a
// turn of several holds costs one release script.
func TestCohortOneQueueEntryPerClient(t *testing.T) {
	e := ftNewEnv(t)
	const name, perClient, rounds = "turns", 6, 15
	clients := []*rlock.Client{e.client(), e.client(), e.client()}
	e.warmUp(clients...)
	var (
		wg, sampler sync.WaitGroup
		inside      atomic.Int32
		overlap     atomic.Int32
		mu          sync.Mutex
		maxWait     time.Duration
		maxQueued   int
		samples     int
	)
	stop := make(chan struct{})
	sampler.Go(func() {
		queue := e.lockKey(name) + ":queue"
		for {
			select {
			case <-stop:
				return
			default:
			}
			entries, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(queue).Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				t.Error(err)
				return
			}
			per := map[string]int{}
			for _, entry := range entries {
				id, _, _ := strings.Cut(entry, ":")
				per[id]++
				maxQueued = max(maxQueued, per[id])
			}
			samples++
		}
	})
	before := e.scripts()
	for _, c := range clients {
		for range perClient {
			wg.Go(func() {
				m := c.Mutex(name)
				for range rounds {
					start := time.Now()
					lc, err := m.Lock(e.ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					mu.Lock()
					maxWait = max(maxWait, time.Since(start))
					mu.Unlock()
					if inside.Add(1) > 1 {
						overlap.Add(1)
					}
					time.Sleep(200 * time.Microsecond) // the critical section
					inside.Add(-1)
					mustUnlockFT(t, m, lc)
				}
			})
		}
	}
	wg.Wait()
	spent := e.scripts() - before
	close(stop)
	sampler.Wait()
	n := len(clients) * perClient * rounds
	perAcq := float64(spent) / float64(n)
	t.Logf("%d acquisitions, %.2f scripts each, longest wait %v; at most %d entry(ies) of one Client queued in %d samples",
		n, perAcq, maxWait, maxQueued, samples)
	if overlap.Load() > 0 {
		t.Errorf("holders overlapped %d time(s)", overlap.Load())
	}
	if samples == 0 {
		t.Error("the queue was never sampled: the check below proves nothing")
	}
	if maxQueued > 1 {
		t.Errorf("%d owners of one Client queued at once, want at most 1", maxQueued)
	}
	// Besides the first attempts, one script per turn of several holds.
	if perAcq > 0.6 {
		t.Errorf("%.2f scripts per acquisition: turns are not taken as a cohort", perAcq)
	}
	if maxWait > 5*time.Second {
		t.Errorf("a waiter waited %v", maxWait)
	}
}

// With no other Client waiting, a Client keeps the lock for its own
// goroutines across budgets: one script per budget, tokens still rising.
func TestCohortKeepsTheLockWhenAloneInRedis(t *testing.T) {
	e := ftNewEnv(t)
	const name, goroutines, rounds = "alone", 6, 30
	c := e.client()
	e.warmUp(c)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []uint64
	)
	before := e.scripts()
	for range goroutines {
		wg.Go(func() {
			m := c.Mutex(name)
			for range rounds {
				lc, err := m.Lock(e.ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				tok, _ := m.Token(lc)
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mustUnlockFT(t, m, lc)
			}
		})
	}
	wg.Wait()
	spent := e.scripts() - before
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token #%d = %d after %d: not rising strictly", i, tokens[i], tokens[i-1])
		}
	}
	perAcq := float64(spent) / float64(len(tokens))
	t.Logf("%d acquisitions, %.2f scripts each", len(tokens), perAcq)
	if perAcq > 0.3 {
		t.Errorf("%.2f scripts per acquisition, want about 1/9 (one per budget)", perAcq)
	}
	if e.exists(e.lockKey(name)) {
		t.Error("lock still held after every goroutine unlocked")
	}
	if m := e.sortedSetMembers(); len(m) != 0 {
		t.Errorf("left queued: %q", m)
	}
}

// When the Client's leader (its one waiter queued in Redis) gives up, the
// next local waiter queues in its place: it is not left waiting in the
// Client for a pass that no one would bring.
func TestCohortLeaderGivesUp(t *testing.T) {
	e := ftNewEnv(t)
	const name = "leader-leaves"
	x, y := e.client(), e.client()
	e.warmUp(x, y)
	hy, err := y.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaderCtx, cancelLeader := context.WithCancel(e.ctx)
	leader := make(chan error, 1)
	go func() {
		_, err := x.Mutex(name).Lock(leaderCtx)
		leader <- err
	}()
	e.queuedIs(1)
	follower := make(chan error, 1)
	go func() {
		lc, err := x.Mutex(name).Lock(e.ctx)
		if err == nil {
			err = x.Mutex(name).Unlock(lc)
		}
		follower <- err
	}()
	e.eventually(ftPatience, "2 waiters in Client X", func() bool { return rlock.WaitingInClient(x, name) == 2 })
	leaderEntries := e.sortedSetMembers()
	if len(leaderEntries) != 2 { // one owner, in the queue and the deadline sets
		t.Fatalf("queued with one leader waiting: %q, want one owner", leaderEntries)
	}
	cancelLeader()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled leader: %v, want context.Canceled", err)
	}
	// The follower queues in the leader's place, which is given up in the
	// background.
	e.eventually(ftPatience, "the follower queued in Redis instead of the leader", func() bool {
		m := e.sortedSetMembers()
		return len(m) == 2 && !slices.Contains(m, leaderEntries[0]) && rlock.WaitingInClient(x, name) == 1
	})
	mustUnlockFT(t, y.Mutex(name), hy)
	select {
	case err := <-follower:
		if err != nil {
			t.Fatalf("follower: %v", err)
		}
	case <-time.After(ftPatience):
		t.Fatal("the follower never got the lock after the leader gave up")
	}
	e.eventually(ftPatience, "nothing left queued", func() bool { return len(e.sortedSetMembers()) == 0 })
}

// Waiters for a local pass (they are not queued in Redis) honour their wait
// timeout, and return ErrClosed when their Client closes under the holder.
func TestCohortLocalWaitersTimeoutAndClose(t *testing.T) {
	e := ftNewEnv(t)
	const name = "cohort-close"
	x, y := e.client(), e.client()
	hy, err := y.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waits in Redis and is handed the lock: a contended acquisition, which
	// reserves fencing tokens to pass on to X's other waiters.
	got := make(chan context.Context, 1)
	go func() {
		lc, err := x.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lc
	}()
	e.queuedIs(1)
	mustUnlockFT(t, y.Mutex(name), hy)
	la := <-got
	if la == nil {
		t.FailNow()
	}

	resB := make(chan error, 1)
	go func() {
		_, err := x.Mutex(name).Lock(e.ctx)
		resB <- err
	}()
	start := time.Now()
	_, err = x.Mutex(name).Lock(e.ctx, rlock.WithWaitTimeout(100*time.Millisecond))
	if !errors.Is(err, rlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with a wait timeout behind a local holder: %v, want ErrLocked and DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 90*time.Millisecond || took > 3*time.Second {
		t.Errorf("Lock with WithWaitTimeout(100ms) returned after %v", took)
	}

	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-resB:
		if !errors.Is(err, rlock.ErrClosed) {
			t.Errorf("waiting Lock after Close: %v, want ErrClosed", err)
		}
	case <-time.After(ftPatience):
		t.Fatal("waiting Lock did not return after Close")
	}
	if cause := context.Cause(la); !errors.Is(cause, rlock.ErrLeaseLost) || !errors.Is(cause, rlock.ErrClosed) {
		t.Errorf("holder's lock context after Close: %v, want ErrLeaseLost and ErrClosed", cause)
	}
}

// warmUp takes and releases a lock once with each Client, so that the scripts
// are loaded and the connections open before anything is measured.
func (e *ftEnv) warmUp(clients ...*rlock.Client) {
	e.t.Helper()
	for _, c := range clients {
		lc, err := c.Mutex("warm-up").Lock(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		mustUnlockFT(e.t, c.Mutex("warm-up"), lc)
	}
}

// A worker that locks in a loop, one goroutine per Client, contended by
// another such Client: while its channel stays subscribed between waits, a
// contended Lock costs one script (acquire-and-queue), not a first attempt
// that cannot queue plus a second that does.
func TestWorkerLoopOneScriptPerContendedLock(t *testing.T) {
	e := ftNewEnv(t)
	const name = "worker-loop"
	const rounds = 200
	clients := []*rlock.Client{e.client(), e.client()}
	e.warmUp(clients...)
	before := e.scripts()
	var wg sync.WaitGroup
	for _, c := range clients {
		m := c.Mutex(name)
		wg.Go(func() {
			for range rounds {
				l, err := m.Lock(e.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(l); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	perAcq := float64(e.scripts()-before) / (2 * rounds)
	t.Logf("%.2f scripts per acquisition", perAcq)
	// One release per acquisition, and mostly one acquire-and-queue (a
	// worker that finds the lock free, or its channel unsubscribed, makes a
	// first attempt too).
	if perAcq > 2.5 {
		t.Fatalf("%.2f scripts per acquisition, want at most 2.5", perAcq)
	}
}
