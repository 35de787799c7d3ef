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

// A member whose lease runs out while Lock waits for a later member, and
// which another Client then takes, is not reported held: Lock takes it again
// once that Client lets it go, and returns only then, holding every member.
func TestMultiLockMemberLostWhileWaitingNotReturned(t *testing.T) {
	e := ftNewEnv(t)
	c, holder, third, probe := e.client(), e.client(), e.client(), e.client()
	e.warmUp(c, holder, third, probe)
	la := ftLock(t, e.ctx, holder.Mutex("x-a"))
	lb := ftLock(t, e.ctx, holder.Mutex("x-b"))
	ml := c.MultiLock("x-a", "x-b")
	res := make(chan multiResult, 1)
	go func() {
		lc, err := ml.Lock(e.ctx, rlock.WithLease(300*time.Millisecond))
		res <- multiResult{lc, err}
	}()
	// Blocked on x-a holding nothing; then it takes x-a (300ms lease) and
	// blocks on x-b holding it.
	e.queuedOn("x-a", 1)
	mustUnlockFT(t, holder.Mutex("x-a"), la)
	e.queuedOn("x-b", 1)
	// x-a's lease runs out while the multi-lock waits: the third Client
	// takes it.
	l3 := ftLock(t, e.ctx, third.Mutex("x-a"))
	mustUnlockFT(t, holder.Mutex("x-b"), lb)
	// The multi-lock now holds x-b only: it must not return success, but
	// wait for x-a again (or fail).
	requeued := func() bool {
		n, err := e.raw.Do(e.ctx, e.raw.B().Zcard().Key(e.lockKey("x-a")+":queue").Build()).AsInt64()
		return err == nil && n == 1
	}
	deadline := time.Now().Add(ftPatience)
	for !requeued() {
		select {
		case r := <-res:
			if r.err == nil {
				checkMultiHeld(t, e, probe, ml, r.lc, l3)
				t.Fatal("Lock returned success while the third Client held x-a")
			}
			t.Logf("Lock failed cleanly: %v", r.err)
			mustUnlockFT(t, third.Mutex("x-a"), l3)
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the multi-lock neither returned nor waited for x-a again")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	if l3.Err() != nil {
		t.Fatalf("the third Client's hold of x-a ended: %v", context.Cause(l3))
	}
	mustUnlockFT(t, third.Mutex("x-a"), l3)
	var r multiResult
	select {
	case r = <-res:
	case <-time.After(ftPatience):
		t.Fatal("the multi-lock did not take x-a once it was free")
	}
	if r.err != nil {
		t.Fatalf("Lock after x-a came free: %v", r.err)
	}
	checkMultiHeld(t, e, probe, ml, r.lc, nil)
	if err := ml.Unlock(r.lc); err != nil {
		t.Fatal(err)
	}
}

// checkMultiHeld fails the test unless lc, returned by ml's Lock, holds every
// member: its lock context live, probe's TryLock of each member refused,
// and other, another Client's hold of a member, not live beside it.
func checkMultiHeld(t *testing.T, e *ftEnv, probe *rlock.Client, ml *rlock.MultiLock, lc, other context.Context) {
	t.Helper()
	if lc.Err() != nil {
		t.Errorf("the returned lock context is already ended: %v", context.Cause(lc))
	}
	if other != nil && other.Err() == nil {
		t.Errorf("another Client's hold of a member is live beside the multi-lock's")
	}
	for _, n := range ml.Names() {
		if l, err := probe.Mutex(n).TryLock(e.ctx); err == nil {
			t.Errorf("member %s free after the multi-lock's Lock returned", n)
			mustUnlockFT(t, probe.Mutex(n), l)
		}
	}
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
	res := goFailingMultiLock(ctx, ml)
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
	owners, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey("y-a")).Build()))
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
	res := goFailingMultiLock(ctx, ml)
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
	owners, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey("z-a")).Build()))
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

// goFailingMultiLock runs ml.Lock(ctx), expected to fail, in a goroutine and
// sends its error (one saying "acquired" if it succeeded, released at once).
func goFailingMultiLock(ctx context.Context, ml *rlock.MultiLock) <-chan error {
	res := make(chan error, 1)
	go func() {
		lc, err := ml.Lock(ctx)
		if err == nil {
			_ = ml.Unlock(lc)
			err = errors.New("acquired")
		}
		res <- err
	}()
	return res
}
