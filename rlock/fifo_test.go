package rlock_test

// Tests of strict FIFO mode (Client.FairMutex, WithFIFO): every Lock call
// queues in Redis under its own owner id, and the lock is acquired in the
// order of that queue.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/relockio/relock/rlock"
)

// Goroutines of three Clients queue one after another while the lock is held
// (each confirmed queued in Redis before the next starts, so the arrival order
// is known); the lock is then acquired in exactly that order, although every
// Client has several goroutines waiting (a cohorting Client would pass the
// lock among its own first), and fencing tokens rise with it.
func TestFIFOAcquisitionFollowsArrival(t *testing.T) {
	for _, mode := range []struct {
		name   string
		opts   []rlock.Option
		mutex  func(c *rlock.Client, name string) *rlock.Mutex
		holder func(c *rlock.Client, name string) *rlock.Mutex
	}{
		{"WithFIFO", []rlock.Option{rlock.WithFIFO()}, (*rlock.Client).Mutex, (*rlock.Client).Mutex},
		{"FairMutex", nil, (*rlock.Client).FairMutex, (*rlock.Client).FairMutex},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := ftNewEnv(t)
			const name = "fifo"
			const perClient = 4
			clients := []*rlock.Client{e.client(mode.opts...), e.client(mode.opts...), e.client(mode.opts...)}
			e.warmUp(clients...)
			holder := mode.holder(clients[0], name)
			hold := ftLock(t, e.ctx, holder)
			first, _ := holder.Token(hold)

			type acq struct {
				arrival int
				token   uint64
			}
			var (
				mu    sync.Mutex
				order []acq
				wg    sync.WaitGroup
			)
			n := perClient * len(clients)
			for i := range n {
				m := mode.mutex(clients[i%len(clients)], name)
				wg.Go(func() {
					lc, err := m.Lock(e.ctx)
					if err != nil {
						t.Error(err)
						return
					}
					tok, _ := m.Token(lc)
					mu.Lock()
					order = append(order, acq{i, tok})
					mu.Unlock()
					if err := m.Unlock(lc); err != nil {
						t.Error(err)
					}
				})
				// Its own place in Redis, behind the ones before it: a
				// cohorting Client's second goroutine would wait in the
				// Client instead, and this would time out.
				e.queuedIs(i + 1)
			}
			mustUnlockFT(t, holder, hold)
			wg.Wait()
			if len(order) != n {
				t.Fatalf("%d acquisitions, want %d", len(order), n)
			}
			last := first
			for k, a := range order {
				if a.arrival != k {
					t.Fatalf("acquisition order %v, want arrival order 0..%d", order, n-1)
				}
				if a.token <= last {
					t.Errorf("acquisition %d has token %d, not above the previous %d", k, a.token, last)
				}
				last = a.token
			}
			e.eventually(ftPatience, "nothing left queued", func() bool { return len(e.sortedSetMembers()) == 0 })
		})
	}
}

// A fair worker's last Unlock hands the lock to the next in the Redis queue
// (another Client) before it returns, keeping nothing for its own Client (no
// turn): its own next Lock queues behind and gets the lock only after the
// other Client's hold.
func TestFIFOUnlockKeepsNoTurn(t *testing.T) {
	e, l := newTurnsEnv(t, "fifo-turn", rlock.WithFIFO())
	m := e.a.Mutex(e.name)
	mustUnlockFT(t, m, l)
	if rlock.Parked(e.a, e.name) {
		t.Fatal("a fair Unlock kept the lock for its Client")
	}
	owners, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey(e.name)).Build()))
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 || !strings.HasPrefix(owners[0], e.b.ID()+":") {
		t.Fatalf("after a's Unlock the lock is held by %q, want the queued Client %s", owners, e.b.ID())
	}
	lb := <-e.bLocked
	if _, err := m.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Fatalf("TryLock of the fair worker while the other Client holds: %v, want ErrLocked", err)
	}
	got := make(chan context.Context, 1)
	go func() { got <- ftLock(t, e.ctx, m) }()
	e.queuedIs(1)
	bTok, _ := e.b.Mutex(e.name).Token(lb)
	close(e.bUnlockNow)
	la := <-got
	if tok, _ := m.Token(la); tok <= bTok {
		t.Errorf("a's next hold has token %d, not above b's %d", tok, bTok)
	}
	mustUnlockFT(t, m, la)
}

// A fair Mutex of a cohorting Client neither joins nor forms a cohort: with a
// fair hold and a waiting fair goroutine of the same Client, nothing is
// passed locally (CohortHeld stays false) and both queue in Redis.
func TestFIFOFormsNoCohort(t *testing.T) {
	e := ftNewEnv(t)
	const name = "fifo-cohort"
	c, other := e.client(), e.client()
	e.warmUp(c, other)
	lo := ftLock(t, e.ctx, other.Mutex(name))
	m := c.FairMutex(name)
	res := make(chan context.Context, 2)
	for i := range 2 {
		go func() { res <- ftLock(t, e.ctx, m) }()
		e.queuedIs(i + 1)
	}
	if n := rlock.WaitingInClient(c, name); n != 0 {
		t.Fatalf("%d fair Lock calls wait in the Client's cohort, want 0", n)
	}
	mustUnlockFT(t, other.Mutex(name), lo)
	l1 := <-res
	if rlock.CohortHeld(c, name) {
		t.Fatal("a fair hold formed a cohort")
	}
	mustUnlockFT(t, m, l1)
	l2 := <-res
	mustUnlockFT(t, m, l2)
	if got := e.sortedSetMembers(); len(got) != 0 {
		t.Fatalf("left queued: %v", got)
	}
}
