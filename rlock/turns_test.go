package rlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// turnsEnv is two Clients, each with one worker goroutine, contending for a
// lock: the fleet of single-goroutine workers in miniature.
type turnsEnv struct {
	*ftEnv
	name       string
	a, b       *rlock.Client
	bLocked    chan context.Context
	bUnlockNow chan struct{}
}

// newTurnsEnv has a hold the lock, taken by hand-off while b queued behind
// it (so a knows others wait), and b still queued.
func newTurnsEnv(t *testing.T, name string, opts ...rlock.Option) (*turnsEnv, context.Context) {
	e := &turnsEnv{ftEnv: ftNewEnv(t), name: name, bLocked: make(chan context.Context, 1), bUnlockNow: make(chan struct{})}
	starter := e.client()
	e.a, e.b = e.client(opts...), e.client(opts...)
	ls := ftLock(t, e.ctx, starter.Mutex(name))
	aLocked := make(chan context.Context, 1)
	go func() { aLocked <- ftLock(t, e.ctx, e.a.Mutex(name)) }()
	e.queuedIs(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := e.b.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Error(err)
			return
		}
		e.bLocked <- l
		<-e.bUnlockNow
		if err := e.b.Mutex(name).Unlock(l); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-e.bUnlockNow:
		default:
			close(e.bUnlockNow)
		}
		<-done
	})
	e.queuedIs(2)
	mustUnlockFT(t, starter.Mutex(name), ls)
	return e, <-aLocked
}

// A worker that locks again right after Unlock, while another Client waits,
// keeps the lock for the rest of its turn without a round trip, and the
// turn ends within the budget: the waiting Client is served next.
func TestTurnCoversTheWorkersNextLock(t *testing.T) {
	e, l := newTurnsEnv(t, "turn")
	m := e.a.Mutex(e.name)
	scripts := e.scripts()
	tokens := []uint64{}
	relocks := 0
	for {
		tok, err := m.Token(l)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		mustUnlockFT(t, m, l)
		if !rlock.Parked(e.a, e.name) {
			break // the turn is over
		}
		l = ftLock(t, e.ctx, m)
		relocks++
		if relocks >= rlock.TurnBudget {
			t.Fatalf("the worker kept the lock for %d holds while another Client waited", relocks+1)
		}
	}
	// The turn ended: b is served next, with a higher token.
	lb := <-e.bLocked
	tb, _ := e.b.Mutex(e.name).Token(lb)
	if last := tokens[len(tokens)-1]; tb <= last {
		t.Fatalf("token %d after a's %d", tb, last)
	}
	if relocks == 0 {
		t.Fatal("the worker's Lock right after Unlock did not take the lock kept for its turn")
	}
	// Passes in the turn ran no script; the release that ended the turn ran
	// one, and b's hand-off none. That release also queued a place for a's
	// next Lock (see TestTwoWorkersTakeTurns), which a never takes: it is
	// given up after the linger, with one more script (two commands when
	// this server has not run that script yet: EVALSHA, refused, then EVAL).
	e.queuedIs(0)
	if got := e.scripts() - scripts; got > 3 {
		t.Fatalf("a turn of %d holds ran %d scripts; want the final release and the reserved place given up", relocks+1, got)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens not rising within the turn: %v", tokens)
		}
	}
	t.Logf("a turn of %d holds", relocks+1)
	close(e.bUnlockNow)
}

// A linger that runs out unused releases the lock to the waiting Client, and
// the worker stops lingering on that lock.
func TestLingerRunsOutToTheNextClient(t *testing.T) {
	e, l := newTurnsEnv(t, "linger", rlock.WithLinger(50*time.Millisecond))
	m := e.a.Mutex(e.name)
	start := time.Now()
	mustUnlockFT(t, m, l)
	if !rlock.Parked(e.a, e.name) {
		t.Fatal("the contended lock was not kept for the worker's next Lock")
	}
	lb := <-e.bLocked
	if waited := time.Since(start); waited < 50*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("b got the lock %v after a's Unlock; want after the 50ms linger, promptly", waited)
	}
	// a queues behind b, c behind a; b's unlock hands the lock to a, which
	// knows c waits, but lingers no more: its last linger was wasted.
	got := make(chan context.Context, 1)
	go func() { got <- ftLock(t, e.ctx, m) }()
	e.queuedIs(1)
	c := e.client()
	cGot := make(chan error, 1)
	go func() {
		l, err := c.Mutex(e.name).Lock(e.ctx)
		if err == nil {
			err = c.Mutex(e.name).Unlock(l)
		}
		cGot <- err
	}()
	e.queuedIs(2)
	if tok, _ := e.b.Mutex(e.name).Token(lb); tok == 0 {
		t.Fatal("no token")
	}
	close(e.bUnlockNow)
	la := <-got
	mustUnlockFT(t, m, la)
	if rlock.Parked(e.a, e.name) {
		t.Fatal("the worker lingered again right after a linger ran out unused")
	}
	if err := <-cGot; err != nil {
		t.Fatal(err)
	}
}

// A worker that stops locking costs the waiting Client a linger fitted to how
// soon its Locks came back after Unlock (core.TurnLinger), not the whole one
// WithLinger allows.
func TestLingerFollowsTheRelockGap(t *testing.T) {
	e, l := newTurnsEnv(t, "linger-gap", rlock.WithLinger(rlock.MaxLinger))
	m := e.a.Mutex(e.name)
	for range 3 {
		mustUnlockFT(t, m, l)
		if !rlock.Parked(e.a, e.name) {
			t.Fatal("the contended lock was not kept for the worker's next Lock")
		}
		l = ftLock(t, e.ctx, m)
	}
	start := time.Now()
	mustUnlockFT(t, m, l)
	if !rlock.Parked(e.a, e.name) {
		t.Fatal("the contended lock was not kept for the worker's next Lock")
	}
	<-e.bLocked
	// A quarter of the linger at least, then the hand-off; the gaps of a
	// loop that locks again at once are far below it.
	waited := time.Since(start)
	if waited > rlock.MaxLinger*9/10 {
		t.Fatalf("b got the lock %v after the worker's last Unlock; want well within the %v linger", waited, rlock.MaxLinger)
	}
	t.Logf("b got the lock %v after the worker's last Unlock (linger up to %v)", waited, rlock.MaxLinger)
	close(e.bUnlockNow)
}

// Close releases a lock kept for a turn at once: the waiting Client does not
// wait for the linger, let alone the lease.
func TestCloseReleasesAParkedLock(t *testing.T) {
	e, l := newTurnsEnv(t, "close-parked", rlock.WithLinger(rlock.MaxLinger))
	mustUnlockFT(t, e.a.Mutex(e.name), l)
	if !rlock.Parked(e.a, e.name) {
		t.Fatal("the contended lock was not kept for the worker's next Lock")
	}
	start := time.Now()
	if err := e.a.Close(); err != nil {
		t.Fatal(err)
	}
	<-e.bLocked
	if waited := time.Since(start); waited > rlock.MaxLinger*9/10 {
		t.Fatalf("b got the lock %v after a closed; want at once", waited)
	}
	close(e.bUnlockNow)
}

// A lock no other Client waits for is never kept: Unlock frees it in Redis at
// once, for anyone.
func TestUncontendedUnlockFreesAtOnce(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(), e.client()
	const name = "uncontended"
	for i := 0; i < 3; i++ { // the second and later acquire-and-queue at once
		l := ftLock(t, e.ctx, a.Mutex(name))
		mustUnlockFT(t, a.Mutex(name), l)
		if e.exists(e.lockKey(name)) || rlock.Parked(a, name) {
			t.Fatalf("round %d: the lock was kept after Unlock with no one waiting", i)
		}
	}
	l, err := b.Mutex(name).TryLock(e.ctx)
	if err != nil {
		t.Fatalf("TryLock by another Client after Unlock: %v", err)
	}
	mustUnlockFT(t, b.Mutex(name), l)
}

// Two worker processes, one goroutine each, locking in a loop: they take
// turns too. A release that ends a turn queues a place for its Client's next
// Lock behind the waiter it serves, so the new holder learns that another
// Client waits (without it, a fleet of two would cross processes on every
// hold), and the next Lock takes that place without a script of its own.
func TestTwoWorkersTakeTurns(t *testing.T) {
	e := ftNewEnv(t)
	const name, perWorker = "two-workers", 120
	clients := []*rlock.Client{e.client(rlock.WithLinger(20 * time.Millisecond)), e.client(rlock.WithLinger(20 * time.Millisecond))}
	e.warmUp(clients...)
	var mu sync.Mutex
	var order []int
	var tokens []uint64
	scripts := e.scripts()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name)
			for range perWorker {
				l, err := m.Lock(e.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				tok, _ := m.Token(l)
				mu.Lock()
				order = append(order, i)
				tokens = append(tokens, tok)
				mu.Unlock()
				time.Sleep(200 * time.Microsecond) // the critical section
				if err := m.Unlock(l); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	switches := 0
	for i := 1; i < len(order); i++ {
		if order[i] != order[i-1] {
			switches++
		}
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
		}
	}
	ran := e.scripts() - scripts
	t.Logf("%d holds, %d switches between the workers, %d scripts", len(order), switches, ran)
	// Both run until done, so the lock must change hands; turns make it do
	// so about once per TurnBudget holds or per burst, not once per hold.
	if switches == 0 || switches > len(order)/3 {
		t.Fatalf("%d switches in %d holds; want turns (at most a third)", switches, len(order))
	}
	if ran > int64(len(order)/2) {
		t.Fatalf("%d scripts for %d holds; want at most one per two holds", ran, len(order))
	}
	// Nothing is left queued or held once both stopped: a reserved place no
	// Lock took is given up.
	e.eventually(5*time.Second, "the lock free and its queue empty", func() bool {
		return !e.exists(e.lockKey(name)) && len(e.sortedSetMembers()) == 0
	})
}
