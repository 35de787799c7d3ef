package rlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// Hand-offs are addressed: with one waiting goroutine in each of several
// Clients, every hand-off is delivered to the one Client it is for, and the
// notice that the claim window of that grant runs (see WithClaimWindow) to
// the one Client queued next (each of these waiters queued behind the first
// holder's long lease, so each would re-check too late otherwise), so the
// messages received in all Clients together are one per hand-off plus one
// per hand-off with a waiter behind it, whatever the number of Clients
// waiting (see TestOneMessagePerHandOffInSteadyState for the usual case).
func TestHandOffReachesOnlyItsClient(t *testing.T) {
	e := ftNewEnv(t)
	const name = "addressed"
	const waiters = 7
	holder := e.client()
	l := ftLock(t, e.ctx, holder.Mutex(name))
	clients := []*rlock.Client{holder}
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		c := e.client()
		clients = append(clients, c)
		go func() {
			l, err := c.Mutex(name).Lock(e.ctx)
			if err == nil {
				err = c.Mutex(name).Unlock(l)
			}
			done <- err
		}()
		e.queuedIs(i + 1) // queued in this order
	}
	received := func() int64 {
		var n int64
		for _, c := range clients {
			n += c.PubSubStats().Messages
		}
		return n
	}
	before := received()
	mustUnlockFT(t, holder.Mutex(name), l)
	for i := 0; i < waiters; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := received() - before; got != 2*waiters-1 {
		t.Fatalf("%d hand-offs delivered %d messages in all; want one each and a notice to the next waiter but for the last", waiters, got)
	}
}

// A waiter whose Client is gone (its process died: Redis closed its
// connections) is skipped when the lock reaches it: the next waiter gets the
// lock at once, not after the dead one's place (two watchdog timeouts) or a
// lease granted to it (one) ran out.
func TestDeadWaiterAtHeadIsSkipped(t *testing.T) {
	e := ftNewEnv(t)
	const name = "dead-head"
	holder := e.client()
	l := ftLock(t, e.ctx, holder.Mutex(name))

	p, err := faultproxy.Start(e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	doomed := e.clientOn(redistest.Client(t, e.srv, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} }))
	doomedCtx, stopDoomed := context.WithCancel(e.ctx)
	doomedDone := make(chan struct{})
	go func() {
		defer close(doomedDone)
		if l, err := doomed.Mutex(name).Lock(doomedCtx); err == nil {
			_ = doomed.Mutex(name).Unlock(l)
		}
	}()
	t.Cleanup(func() { stopDoomed(); <-doomedDone })
	e.queuedIs(1)

	next := e.client()
	got := make(chan error, 1)
	go func() {
		l, err := next.Mutex(name).Lock(e.ctx)
		if err == nil {
			err = next.Mutex(name).Unlock(l)
		}
		got <- err
	}()
	e.queuedIs(2)

	// The doomed Client's process "dies": its connections close and it can
	// reach Redis no more, so it neither hears nor gives up its place.
	p.Block(true)
	p.Cut()
	e.numSubIs(e.lockKey(name)+":to:"+doomed.ID(), 0)

	start := time.Now()
	mustUnlockFT(t, holder.Mutex(name), l)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a dead one did not get the lock within 10s")
	}
	t.Logf("next waiter served %v after the unlock", time.Since(start))
}

// Workers taking turns through Redis (linger 0: every hold a hand-off between
// Clients) queue behind holds granted for a claim window, so no waiter plans a
// re-check beyond the window and no hand-off needs the notice to the next
// waiter: once the first holder's long lease is out of the queue, every
// hand-off costs one delivered message, whatever the number of Clients.
func TestOneMessagePerHandOffInSteadyState(t *testing.T) {
	e := ftNewEnv(t)
	const name, workers = "steady", 4
	var clients []*rlock.Client
	for range workers {
		clients = append(clients, e.client(rlock.WithLinger(0)))
	}
	e.warmUp(clients...)
	var acquisitions atomic.Int64
	received := func() (n int64) {
		for _, c := range clients {
			n += c.PubSubStats().Messages
		}
		return n
	}
	warm := time.Now().Add(500 * time.Millisecond)
	stop := warm.Add(time.Second)
	type snap struct{ acq, msg int64 }
	at := make(chan snap, 1)
	var once sync.Once
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(name)
			for time.Now().Before(stop) {
				l, err := m.Lock(e.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if time.Now().After(warm) {
					once.Do(func() { at <- snap{acquisitions.Load(), received()} })
				}
				acquisitions.Add(1)
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
	s := <-at
	acq, msg := acquisitions.Load()-s.acq, received()-s.msg
	t.Logf("after warm-up: %d acquisitions, %d messages delivered", acq, msg)
	if acq < 50 {
		t.Fatalf("only %d acquisitions in a second", acq)
	}
	if msg > acq+workers {
		t.Fatalf("%d messages for %d acquisitions: hand-offs cost more than one message each", msg, acq)
	}
}
