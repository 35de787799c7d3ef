package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// TestStuckGranteeHoldsQueueForClaimWindow: permits handed to a waiter whose
// Client is stuck with its connection open (the proxy in front of it stalls
// right after its Acquire returned, before the Client extended the grant) are
// granted for its claim window only (see rlock.WithClaimWindow): the waiter
// behind it, told when that window lapses, gets them then, not after the
// 30s lease, and the stuck waiter's permit context ends with ErrLeaseLost.
func TestStuckGranteeHoldsQueueForClaimWindow(t *testing.T) {
	e := newEnv(t)
	const name = "claim-stuck"
	holder := e.sem(e.client(), name, 1)
	pc, proxy := e.proxied()
	stuck := e.sem(pc, name, 1)
	next := e.sem(e.client(), name, 1)

	held := mustAcquire(t, holder, e.ctx, 1)
	stuckCh := goAcquire(stuck, e.ctx, 1)
	waitFor(t, 5*time.Second, "the first waiter queued", func() bool { return e.queueLen(name) == 1 })
	nextCh := goAcquire(next, e.ctx, 1)
	waitFor(t, 5*time.Second, "the second waiter queued", func() bool { return e.queueLen(name) == 2 })

	mustRelease(t, holder, held)
	granted := receive(t, stuckCh, prompt, "the first waiter")
	proxy.Stall()
	defer proxy.Resume()

	r := receive(t, nextCh, 10*time.Second, "the waiter behind the stuck one")
	waited := r.at.Sub(granted.at)
	t.Logf("the waiter behind the stuck one got the permit %v after the hand-off", waited)
	if waited < rlock.DefaultClaimWindow/2 {
		t.Errorf("the second waiter got the permit %v after the hand-off: before the first one's claim could lapse", waited)
	}
	select {
	case <-granted.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck waiter's permit context did not end")
	}
	if cause := context.Cause(granted.ctx); !errors.Is(cause, semaphore.ErrLeaseLost) {
		t.Errorf("the stuck waiter's permit context ended with %v, want ErrLeaseLost", cause)
	}
	if n := e.queueLen(name); n != 0 {
		t.Errorf("queue length = %d, want 0", n)
	}
	proxy.Resume()
	mustRelease(t, next, r.ctx)
}

// TestStuckGranteeBehindClaimNeedsNoNotice: a waiter queued behind permits
// granted for a claim window plans to re-check when that window lapses, so the
// hand-off that follows, to a waiter that then gets stuck with its connection
// open, sends it no notice: its own re-checks find the stuck waiter's claim
// and then take the permit once that lapses, a claim window after the
// hand-off, long before the third of the watchdog timeout it would otherwise
// wait.
func TestStuckGranteeBehindClaimNeedsNoNotice(t *testing.T) {
	e := newEnv(t)
	const name = "claim-no-notice"
	first := e.sem(e.client(), name, 1)
	claimed := e.sem(e.client(), name, 1)
	pc, proxy := e.proxied()
	stuck := e.sem(pc, name, 1)
	wc := e.client()
	last := e.sem(wc, name, 1)

	held := mustAcquire(t, first, e.ctx, 1)
	claimedCh := goAcquire(claimed, e.ctx, 1)
	waitFor(t, 5*time.Second, "the first waiter queued", func() bool { return e.queueLen(name) == 1 })
	stuckCh := goAcquire(stuck, e.ctx, 1)
	waitFor(t, 5*time.Second, "the second waiter queued", func() bool { return e.queueLen(name) == 2 })
	mustRelease(t, first, held)
	// Handed over for the claim window; its Client extends it about a third
	// of the window later, after the last waiter queued behind it.
	byClaim := receive(t, claimedCh, prompt, "the first waiter")
	lastCh := goAcquire(last, e.ctx, 1)
	waitFor(t, 5*time.Second, "the last waiter queued", func() bool { return e.queueLen(name) == 2 })
	before := wc.PubSubStats().Messages

	mustRelease(t, claimed, byClaim.ctx)
	granted := receive(t, stuckCh, prompt, "the stuck waiter")
	proxy.Stall()
	defer proxy.Resume()

	r := receive(t, lastCh, 15*time.Second, "the waiter behind the stuck one")
	waited := r.at.Sub(granted.at)
	t.Logf("the waiter behind the stuck one got the permit %v after the hand-off", waited)
	if waited < rlock.DefaultClaimWindow/2 {
		t.Errorf("the last waiter got the permit %v after the hand-off: before the stuck one's claim could lapse", waited)
	}
	if waited > rlock.DefaultClaimWindow+3*time.Second {
		t.Errorf("the last waiter got the permit %v after the hand-off: the stuck one held the queue up past its claim window (%v)", waited, rlock.DefaultClaimWindow)
	}
	if n := wc.PubSubStats().Messages - before; n != 0 {
		t.Errorf("the last waiter's Client received %d messages, want none: it planned to re-check within the claim window, and took the permit itself", n)
	}
	waitDone(t, granted.ctx, 10*time.Second, "the stuck waiter's permit context")
	if cause := context.Cause(granted.ctx); !errors.Is(cause, semaphore.ErrLeaseLost) {
		t.Errorf("the stuck waiter's permit context ended with %v, want ErrLeaseLost", cause)
	}
	proxy.Resume()
	mustRelease(t, last, r.ctx)
}

// TestTwoStuckWaitersInARow: two waiters at the head whose Clients are stuck
// with their connections open (their proxies stall before the release) are
// each granted the permit in turn for their claim windows, and the live
// waiter behind them gets it after about two windows, not at its own re-check
// (a third of its 90s watchdog timeout): told when the first claim lapses,
// its re-check granted the permit to the second and learned when that claim
// lapses in turn.
func TestTwoStuckWaitersInARow(t *testing.T) {
	e := newEnv(t)
	const name = "claim-two-stuck"
	holder := e.sem(e.client(), name, 1)
	pc1, proxy1 := e.proxied()
	pc2, proxy2 := e.proxied()
	next := e.sem(e.client(rlock.WithWatchdogTimeout(90*time.Second)), name, 1)

	held := mustAcquire(t, holder, e.ctx, 1)
	goAcquire(e.sem(pc1, name, 1), e.ctx, 1)
	waitFor(t, 5*time.Second, "the first waiter queued", func() bool { return e.queueLen(name) == 1 })
	goAcquire(e.sem(pc2, name, 1), e.ctx, 1)
	waitFor(t, 5*time.Second, "the second waiter queued", func() bool { return e.queueLen(name) == 2 })
	nextCh := goAcquire(next, e.ctx, 1)
	waitFor(t, 5*time.Second, "the live waiter queued", func() bool { return e.queueLen(name) == 3 })

	proxy1.Stall()
	proxy2.Stall()
	defer proxy1.Resume()
	defer proxy2.Resume()
	start := time.Now()
	mustRelease(t, holder, held)
	r := receive(t, nextCh, 4*rlock.DefaultClaimWindow, "the waiter behind two stuck ones")
	waited := r.at.Sub(start)
	t.Logf("the waiter behind two stuck ones got the permit %v after the release (claim window %v)", waited, rlock.DefaultClaimWindow)
	if waited < rlock.DefaultClaimWindow {
		t.Errorf("the live waiter got the permit %v after the release: before the first stuck waiter's claim could lapse", waited)
	}
	proxy1.Resume()
	proxy2.Resume()
	mustRelease(t, next, r.ctx)
}

// TestClaimExtendedSemaphore: a waiter that takes the permits up keeps them
// past the claim window, its Client having extended the grant to the lease.
func TestClaimExtendedSemaphore(t *testing.T) {
	e := newEnv(t)
	const name = "claim-extended"
	holder := e.sem(e.client(), name, 1)
	waiter := e.sem(e.client(), name, 1)
	held := mustAcquire(t, holder, e.ctx, 1)
	ch := goAcquire(waiter, e.ctx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	mustRelease(t, holder, held)
	r := receive(t, ch, prompt, "the waiter")
	select {
	case <-r.ctx.Done():
		t.Fatalf("the permits were lost: %v", context.Cause(r.ctx))
	case <-time.After(time.Until(r.at.Add(rlock.DefaultClaimWindow + time.Second))):
	}
	if n := waiter.Permits(r.ctx); n != 1 {
		t.Errorf("Permits = %d past the claim window, want 1", n)
	}
	mustRelease(t, waiter, r.ctx)
}

// TestClaimWithLeaseSemaphore: a WithLease acquisition handed permits
// confirms the grant on receipt, with one round trip that sets its whole
// lease (the watchdog, which extends claims, does not renew it).
func TestClaimWithLeaseSemaphore(t *testing.T) {
	e := newEnv(t)
	const name = "claim-lease"
	const lease = 20 * time.Second
	holder := e.sem(e.client(), name, 1)
	waiter := e.sem(e.client(), name, 1)
	held := mustAcquire(t, holder, e.ctx, 1)
	ch := goAcquire(waiter, e.ctx, 1, semaphore.WithLease(lease))
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	mustRelease(t, holder, held)
	r := receive(t, ch, prompt, "the waiter")
	at, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.base(name)+":permits").Min("0").Max("0").Withscores().Build()).AsZScores()
	if err != nil || len(at) != 1 {
		t.Fatalf("permits zset = %v, %v", at, err)
	}
	now, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := time.ParseDuration(now[0] + "s")
	usec, _ := time.ParseDuration(now[1] + "us")
	left := time.Duration(at[0].Score)*time.Millisecond - sec - usec
	if left <= rlock.DefaultClaimWindow || left > lease {
		t.Errorf("the permit's lease has %v left right after the hand-off, want about its lease (%v)", left, lease)
	}
	mustRelease(t, waiter, r.ctx)
}

// inspectClaimWindow is long enough that a claim held back at its extension
// (due a third of the way in) is inspected well before it lapses.
const inspectClaimWindow = 9 * time.Second

// TestInspectClaimUntilExtended: permits handed to a waiter for its claim
// window inspect as a claim until its Client's extension (held back here at a
// gate) runs; then as a hold of the whole lease.
func TestInspectClaimUntilExtended(t *testing.T) {
	e := newEnv(t)
	const name = "inspect-claim"
	gate := redistest.NewGate(redistest.Client(t, e.srv), e.base(name))
	grantee, err := rlock.New(gate, rlock.WithKeyPrefix(e.prefix), rlock.WithClaimWindow(inspectClaimWindow))
	if err != nil {
		t.Fatalf("rlock.New: %v", err)
	}
	t.Cleanup(func() { _ = grantee.Close() })
	holder, waiter := e.sem(e.client(), name, 1), e.sem(grantee, name, 1)
	inspect := func() rlock.Holder {
		t.Helper()
		info, err := holder.Inspect(e.ctx)
		if err != nil || len(info.Holders) != 1 {
			t.Fatalf("Inspect: %+v, %v; want one holder", info, err)
		}
		return info.Holders[0]
	}

	held := mustAcquire(t, holder, e.ctx, 1)
	if h := inspect(); h.Claim {
		t.Errorf("an acquisition's permit: holder %+v; want no claim", h)
	}
	ch := goAcquire(waiter, e.ctx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	mustRelease(t, holder, held)
	r := receive(t, ch, prompt, "the waiter")
	t.Cleanup(func() { _ = waiter.Release(r.ctx) })
	select {
	case <-gate.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the claim extension was never sent")
	}
	h := inspect()
	if h.ClientID != grantee.ID() || !h.Claim || h.Count != 1 || h.LeaseLeft <= 0 || h.LeaseLeft > inspectClaimWindow {
		t.Fatalf("before the extension: holder %+v; want Client %s, 1 permit, a claim of at most %v",
			h, grantee.ID(), inspectClaimWindow)
	}
	gate.Open()
	waitFor(t, 10*time.Second, "the claim inspected as extended", func() bool { return !inspect().Claim })
	if h := inspect(); h.LeaseLeft <= inspectClaimWindow {
		t.Errorf("after the extension: holder %+v; want the lease", h)
	}
	if err := context.Cause(r.ctx); err != nil {
		t.Fatalf("the grantee's permit ended: %v", err)
	}
}
