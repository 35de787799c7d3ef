package rlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// A goroutine that the release of its Client's turn queued in Redis (a
// promoted place) and that Redis then granted the lock takes it up at once,
// not after sleeping past its grant, when the grant's message is one it
// cannot take without a round trip:
//   - the release itself granted the place (the waiter ahead was gone: its
//     grant went unheard), and its reply names no fence below the grant's;
//   - the release's reply came later than half a claim, after another
//     Client took its grant and released it to the place at once.
//
// (It slept until the claim of the grant it was told of, 2s and 600ms here,
// and woke as the place's own claim lapsed.)
func TestPromotedPlaceTakesItsGrant(t *testing.T) {
	t.Run("granted by the release", func(t *testing.T) {
		e := ftNewEnv(t)
		const claim = 2 * time.Second
		fc := ftFaulty(t, e.srv)
		a, b := e.clientOn(fc, rlock.WithClaimWindow(claim)), e.client(rlock.WithClaimWindow(claim))
		const name = "promoted-granted-by-release"
		mb := b.Mutex(name)
		lb := ftLock(t, e.ctx, mb)
		first := make(chan ftResult, 1)
		go func() { l, err := a.Mutex(name).Lock(e.ctx); first <- ftResult{l, err} }()
		e.queuedIs(1)
		// A waiter queued behind A's whose Client is gone: no one listens
		// on its grant channel, so its grant is unheard and undone.
		key := e.lockKey(name)
		now, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		var sec, usec int64
		fmt.Sscan(now[0], &sec)
		fmt.Sscan(now[1], &usec)
		gone := "gone-client:1/30000/2000/00ff/"
		if _, err := e.srv.Do(e.ctx, "ZADD", key+":queue", fmt.Sprint(sec*1_000_000+usec), gone); err != nil {
			t.Fatal(err)
		}
		if _, err := e.srv.Do(e.ctx, "ZADD", key+":waiters", fmt.Sprint(sec*1000+60_000), gone); err != nil {
			t.Fatal(err)
		}
		second := make(chan ftResult, 1)
		go func() { l, err := a.Mutex(name).Lock(e.ctx); second <- ftResult{l, err} }()
		e.eventually(ftPatience, "a second goroutine waiting in A", func() bool { return rlock.WaitingInClient(a, name) == 2 })
		mustUnlockFT(t, mb, lb)
		r := <-first
		if r.err != nil {
			t.Fatal(r.err)
		}
		rlock.EndTurn(a.Mutex(name)) // the release goes through Redis, naming the successor
		// The release's reply comes 20ms late: the grant's message is in first.
		fc.set(once("release", ftFault{run: true, delay: 20 * time.Millisecond}))
		start := time.Now()
		if err := a.Mutex(name).Unlock(r.ctx); err != nil {
			t.Fatal(err)
		}
		r2 := <-second
		if r2.err != nil {
			t.Fatal(r2.err)
		}
		if took := time.Since(start); took > claim/2 {
			t.Errorf("the promoted place took the lock %v after the release (claim %v): it slept past its grant", took, claim)
		}
		mustUnlockFT(t, a.Mutex(name), r2.ctx)
	})
	t.Run("reply later than half a claim", func(t *testing.T) {
		e := ftNewEnv(t)
		const claim = 600 * time.Millisecond
		const late = 400 * time.Millisecond
		fc := ftFaulty(t, e.srv)
		a := e.clientOn(fc, rlock.WithClaimWindow(claim))
		b, c := e.client(rlock.WithClaimWindow(claim)), e.client(rlock.WithClaimWindow(claim))
		const name = "promoted-late-reply"
		lb := ftLock(t, e.ctx, b.Mutex(name))
		first := make(chan ftResult, 1)
		go func() { l, err := a.Mutex(name).Lock(e.ctx); first <- ftResult{l, err} }()
		e.queuedIs(1)
		cDone := make(chan error, 1)
		go func() {
			l, err := c.Mutex(name).Lock(e.ctx)
			if err == nil {
				err = c.Mutex(name).Unlock(l) // at once: the lock goes to A's place
			}
			cDone <- err
		}()
		e.queuedIs(2)
		second := make(chan ftResult, 1)
		go func() { l, err := a.Mutex(name).Lock(e.ctx); second <- ftResult{l, err} }()
		e.eventually(ftPatience, "a second goroutine waiting in A", func() bool { return rlock.WaitingInClient(a, name) == 2 })
		mustUnlockFT(t, b.Mutex(name), lb)
		r := <-first
		if r.err != nil {
			t.Fatal(r.err)
		}
		rlock.EndTurn(a.Mutex(name))
		fc.set(once("release", ftFault{run: true, delay: late}))
		start := time.Now()
		if err := a.Mutex(name).Unlock(r.ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-cDone; err != nil {
			t.Fatal(err)
		}
		r2 := <-second
		if r2.err != nil {
			t.Fatal(r2.err)
		}
		if took := time.Since(start); took > late+claim/2 {
			t.Errorf("the promoted place took the lock %v after the release was sent (its reply %v late, claim %v): it slept past its grant", took, late, claim)
		}
		mustUnlockFT(t, a.Mutex(name), r2.ctx)
	})
}
