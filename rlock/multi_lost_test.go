package rlock_test

// Tests of what a MultiLock holds when Lock returns: every member on
// success, none on failure, and no member kept for a linger.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

type multiResult struct {
	lc  context.Context
	err error
}

// A Lock that fails after taking a contended member releases it in Redis
// before it returns, to the Client waiting there, rather than keeping it for
// its own Client's next Lock for the linger.
func TestMultiLockFailureReleasesWithoutLinger(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client(rlock.WithLinger(rlock.MaxLinger))
	holder, waiter := e.client(), e.client()
	e.warmUp(c, holder, waiter)
	la := ftLock(t, e.ctx, holder.Mutex("y-a"))
	lb := ftLock(t, e.ctx, holder.Mutex("y-b"))
	ml := c.MultiLock("y-a", "y-b")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		lc, err := ml.Lock(ctx)
		if err == nil {
			_ = ml.Unlock(lc)
			err = errors.New("acquired")
		}
		res <- err
	}()
	e.queuedOn("y-a", 1)
	// Another Client waits for y-a behind the multi-lock: the multi-lock's
	// hold of y-a is contended, which lets an Unlock keep it for a linger.
	wres := make(chan multiResult, 1)
	go func() {
		lc, err := waiter.Mutex("y-a").Lock(e.ctx)
		wres <- multiResult{lc, err}
	}()
	e.queuedOn("y-a", 2)
	mustUnlockFT(t, holder.Mutex("y-a"), la)
	e.queuedOn("y-b", 1)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	owners, err := e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey("y-a")).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if strings.HasPrefix(o, c.ID()+":") {
			t.Fatalf("y-a still held by the multi-lock's Client (%q) after its Lock failed", owners)
		}
	}
	r := <-wres
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlockFT(t, waiter.Mutex("y-a"), r.lc)
	mustUnlockFT(t, holder.Mutex("y-b"), lb)
}

// A Lock that fails after taking a contended member which a goroutine of its
// own Client waits for releases it in Redis too: the Client waiting there
// gets it first, and the goroutine, queued behind it, next.
func TestMultiLockFailureReleasesInRedisBeforeOwnWaiter(t *testing.T) {
	e := ftNewEnv(t)
	c, holder, waiter := e.client(), e.client(), e.client()
	e.warmUp(c, holder, waiter)
	la := ftLock(t, e.ctx, holder.Mutex("z-a"))
	lb := ftLock(t, e.ctx, holder.Mutex("z-b"))
	ml := c.MultiLock("z-a", "z-b")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		lc, err := ml.Lock(ctx)
		if err == nil {
			_ = ml.Unlock(lc)
			err = errors.New("acquired")
		}
		res <- err
	}()
	e.queuedOn("z-a", 1)
	own := make(chan multiResult, 1)
	go func() {
		lc, err := c.Mutex("z-a").Lock(e.ctx)
		own <- multiResult{lc, err}
	}()
	e.eventually(ftPatience, "a goroutine of the Client waits behind the multi-lock", func() bool {
		return rlock.WaitingInClient(c, "z-a") == 2
	})
	wres := make(chan multiResult, 1)
	go func() {
		lc, err := waiter.Mutex("z-a").Lock(e.ctx)
		wres <- multiResult{lc, err}
	}()
	e.queuedOn("z-a", 2)
	mustUnlockFT(t, holder.Mutex("z-a"), la)
	e.queuedOn("z-b", 1)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	owners, err := e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey("z-a")).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 || !strings.HasPrefix(owners[0], waiter.ID()+":") {
		t.Fatalf("after the failed Lock z-a is held by %q, want the Client queued in Redis (%s)", owners, waiter.ID())
	}
	r := <-wres
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlockFT(t, waiter.Mutex("z-a"), r.lc)
	select {
	case r = <-own:
	case <-time.After(ftPatience):
		t.Fatal("the Client's own waiter did not get z-a after the other Client")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlockFT(t, c.Mutex("z-a"), r.lc)
	mustUnlockFT(t, holder.Mutex("z-b"), lb)
}
