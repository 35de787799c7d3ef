package rlock_test

// Tests of MultiLock: several locks taken all or nothing, in one order.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// Two Clients lock overlapping sets given in opposite orders, many times over,
// while a third takes single members: no deadlock (all finish well within a
// generous bound), and no two holders of a member overlap.
func TestMultiLockOppositeOrdersNoDeadlock(t *testing.T) {
	e := ftNewEnv(t)
	x, y, z := e.client(), e.client(), e.client()
	e.warmUp(x, y, z)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	names := []string{"m-a", "m-b", "m-c", "m-d"}
	inside := map[string]*atomic.Int32{}
	for _, n := range names {
		inside[n] = new(atomic.Int32)
	}
	var overlaps atomic.Int32
	critical := func(set []string) {
		for _, n := range set {
			if inside[n].Add(1) > 1 {
				overlaps.Add(1)
			}
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the critical section
		for _, n := range set {
			inside[n].Add(-1)
		}
	}
	const rounds = 60
	var wg sync.WaitGroup
	for g, w := range []struct {
		c   *rlock.Client
		set []string
	}{
		{x, []string{"m-a", "m-b", "m-c"}},
		{y, []string{"m-c", "m-b", "m-a"}},
		{x, []string{"m-d", "m-b"}},
		{y, []string{"m-b", "m-d", "m-a"}},
	} {
		ml := w.c.MultiLock(w.set...)
		wg.Go(func() {
			for r := range rounds {
				lc, err := ml.Lock(ctx)
				if err != nil {
					t.Errorf("goroutine %d round %d: %v", g, r, err)
					return
				}
				critical(w.set)
				if err := ml.Unlock(lc); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		})
	}
	for _, n := range names {
		m := z.Mutex(n)
		wg.Go(func() {
			for range rounds / 2 {
				lc, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("single %s: %v", n, err)
					return
				}
				critical([]string{n})
				if err := m.Unlock(lc); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the multi-locks did not finish within a minute: deadlock")
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("holders of a member overlapped %d time(s)", n)
	}
	for _, n := range names {
		if e.exists(e.lockKey(n)) {
			t.Errorf("lock %s still held at the end", n)
		}
	}
}

// TryLock of a set with one member held elsewhere fails with ErrLocked naming
// that member, and leaves the other members free.
func TestMultiLockTryLockPartialFailureReleases(t *testing.T) {
	e := ftNewEnv(t)
	c, other := e.client(), e.client()
	lo := ftLock(t, e.ctx, other.Mutex("p-b"))
	ml := c.MultiLock("p-c", "p-b", "p-a")
	_, err := ml.TryLock(e.ctx)
	if !errors.Is(err, rlock.ErrLocked) || !strings.Contains(err.Error(), `"p-b"`) {
		t.Fatalf("TryLock with a member taken: %v, want ErrLocked naming p-b", err)
	}
	for _, n := range []string{"p-a", "p-c"} {
		if e.exists(e.lockKey(n)) {
			t.Errorf("member %s left locked after a failed TryLock", n)
		}
	}
	mustUnlockFT(t, other.Mutex("p-b"), lo)
	lc, err := ml.TryLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(lc); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}

// A Lock cancelled while it waits holds nothing afterwards and leaves no
// place queued: both while it waits holding nothing (the first member it
// found taken) and while it waits for a later member holding earlier ones.
func TestMultiLockCancelWhileWaitingHoldsNothing(t *testing.T) {
	e := ftNewEnv(t)
	c, other := e.client(), e.client()
	e.warmUp(c, other)
	lb := ftLock(t, e.ctx, other.Mutex("w-b"))
	lc := ftLock(t, e.ctx, other.Mutex("w-c"))
	ml := c.MultiLock("w-a", "w-b", "w-c")
	ctx, cancel := context.WithCancel(e.ctx)
	res := make(chan error, 1)
	go func() {
		l, err := ml.Lock(ctx)
		if err == nil {
			err = errors.New("acquired")
			_ = ml.Unlock(l)
		}
		res <- err
	}()
	// Blocked on w-b, holding nothing (w-a was released), asleep.
	e.queuedIs(1)
	e.quiet()
	if e.exists(e.lockKey("w-a")) {
		t.Fatal("w-a held while the multi-lock waits for w-b")
	}
	// w-b comes free: the multi-lock takes it, tries w-a again and waits
	// for w-c holding w-a and w-b.
	mustUnlockFT(t, other.Mutex("w-b"), lb)
	e.eventually(ftPatience, "w-a and w-b taken, w-c waited for", func() bool {
		return e.exists(e.lockKey("w-a")) && e.exists(e.lockKey("w-b")) && len(e.sortedSetMembers()) > 0
	})
	e.quiet()
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	for _, n := range []string{"w-a", "w-b"} {
		if e.exists(e.lockKey(n)) {
			t.Errorf("member %s still held after the cancelled Lock returned", n)
		}
	}
	e.eventually(ftPatience, "no place left queued", func() bool { return len(e.sortedSetMembers()) == 0 })
	mustUnlockFT(t, other.Mutex("w-c"), lc)
}

// Each member has its own fencing token, which rises from one acquisition to
// the next, and which the member's Mutex reports from the lock context too.
func TestMultiLockTokensPerMember(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	ml := c.MultiLock("t-x", "t-y", "t-x")
	if got := ml.Names(); len(got) != 2 || got[0] != "t-x" || got[1] != "t-y" {
		t.Fatalf("Names() = %q, want the deduplicated, sorted set", got)
	}
	var last map[string]uint64
	for r := range 3 {
		lc, err := ml.Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		tokens, err := ml.Tokens(lc)
		if err != nil {
			t.Fatal(err)
		}
		if len(tokens) != 2 {
			t.Fatalf("Tokens = %v, want one per member", tokens)
		}
		for name, tok := range tokens {
			if mt, err := c.Mutex(name).Token(lc); err != nil || mt != tok {
				t.Errorf("Mutex(%q).Token = %d, %v; want %d", name, mt, err, tok)
			}
			if r > 0 && tok <= last[name] {
				t.Errorf("round %d: token of %s is %d, not above %d", r, name, tok, last[name])
			}
		}
		last = tokens
		if err := ml.Unlock(lc); err != nil {
			t.Fatal(err)
		}
		if _, err := ml.Tokens(e.ctx); !errors.Is(err, rlock.ErrNotHeld) {
			t.Fatalf("Tokens of a context without the hold: %v, want ErrNotHeld", err)
		}
	}
}

// The lock context ends as soon as one member's hold is lost, with a cause
// naming it; Unlock then releases the others and reports the lost one.
func TestMultiLockMemberLeaseLost(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(600 * time.Millisecond))
	admin := e.client()
	ml := c.MultiLock("l-a", "l-b")
	lc, err := ml.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := admin.Mutex("l-b").ForceUnlock(e.ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case <-lc.Done():
	case <-time.After(ftPatience):
		t.Fatal("lock context not ended after a member was lost")
	}
	cause := context.Cause(lc)
	if !errors.Is(cause, rlock.ErrLeaseLost) || !strings.Contains(cause.Error(), `"l-b"`) {
		t.Fatalf("cause %v, want ErrLeaseLost naming l-b", cause)
	}
	err = ml.Unlock(lc)
	if !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), `"l-b"`) {
		t.Fatalf("Unlock after losing l-b: %v, want ErrNotHeld for l-b", err)
	}
	if e.exists(e.lockKey("l-a")) {
		t.Fatal("l-a still held after Unlock")
	}
}

// Re-entry: a context holding a member re-enters it, and one holding the whole
// set re-enters all of it; each Unlock takes off one level.
func TestMultiLockReentry(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	ma := c.Mutex("r-a")
	la := ftLock(t, e.ctx, ma)
	ml := c.MultiLock("r-a", "r-b")
	outer, err := ml.Lock(la)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := ml.TryLock(outer)
	if err != nil {
		t.Fatal(err)
	}
	count := func(lc context.Context, name string) int {
		n, err := c.Mutex(name).HoldCount(lc)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := count(inner, "r-a"), count(inner, "r-b"); a != 3 || b != 2 {
		t.Fatalf("hold counts %d, %d; want 3, 2", a, b)
	}
	if err := ml.Unlock(inner); err != nil {
		t.Fatal(err)
	}
	if outer.Err() != nil {
		t.Fatal("the outer lock context ended with the inner Unlock")
	}
	if err := ml.Unlock(outer); err != nil {
		t.Fatal(err)
	}
	if a := count(la, "r-a"); a != 1 || e.exists(e.lockKey("r-b")) {
		t.Fatalf("after both Unlocks: r-a count %d (want 1), r-b held %v", a, e.exists(e.lockKey("r-b")))
	}
	mustUnlockFT(t, ma, la)
}

// Bad input is reported by every method with ErrInvalidName, and nothing is
// written to Redis.
func TestMultiLockBadInput(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	for _, names := range [][]string{nil, {}, {"ok", ""}, {"ok", "a{b}"}} {
		ml := c.MultiLock(names...)
		if _, err := ml.Lock(e.ctx); !errors.Is(err, rlock.ErrInvalidName) {
			t.Errorf("MultiLock(%q).Lock: %v, want ErrInvalidName", names, err)
		}
		if _, err := ml.TryLock(e.ctx); !errors.Is(err, rlock.ErrInvalidName) {
			t.Errorf("MultiLock(%q).TryLock: %v, want ErrInvalidName", names, err)
		}
		if err := ml.Unlock(e.ctx); !errors.Is(err, rlock.ErrInvalidName) {
			t.Errorf("MultiLock(%q).Unlock: %v, want ErrInvalidName", names, err)
		}
		if _, err := ml.Tokens(e.ctx); !errors.Is(err, rlock.ErrInvalidName) {
			t.Errorf("MultiLock(%q).Tokens: %v, want ErrInvalidName", names, err)
		}
	}
	ml := c.MultiLock("ok")
	var noCtx context.Context // the bad input under test
	if _, err := ml.Lock(noCtx); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Errorf("Lock(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := ml.Lock(e.ctx, rlock.WithLease(-time.Second)); !errors.Is(err, rlock.ErrInvalidLease) {
		t.Errorf("Lock with a negative lease: %v, want ErrInvalidLease", err)
	}
	if keys, err := e.srv.Keys(e.ctx, e.prefix+"*"); err != nil || len(keys) != 0 {
		t.Errorf("bad input left keys %v (%v)", keys, err)
	}
}

// WithWaitTimeout bounds the whole wait (ErrLocked and DeadlineExceeded,
// nothing held afterwards); WithLease gives every member that lease, and the
// lock context ends when the first of them runs out.
func TestMultiLockOptions(t *testing.T) {
	e := ftNewEnv(t)
	c, other := e.client(), e.client()
	lb := ftLock(t, e.ctx, other.Mutex("o-b"))
	ml := c.MultiLock("o-a", "o-b")
	start := time.Now()
	_, err := ml.Lock(e.ctx, rlock.WithWaitTimeout(200*time.Millisecond))
	if !errors.Is(err, rlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a wait timeout: %v, want ErrLocked and DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 190*time.Millisecond || took > 5*time.Second {
		t.Errorf("Lock with WithWaitTimeout(200ms) returned after %v", took)
	}
	if e.exists(e.lockKey("o-a")) {
		t.Fatal("o-a held after the wait timed out")
	}
	e.eventually(ftPatience, "no place left queued", func() bool { return len(e.sortedSetMembers()) == 0 })
	mustUnlockFT(t, other.Mutex("o-b"), lb)

	lc, err := ml.Lock(e.ctx, rlock.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ml.Names() {
		if ttl, err := c.Mutex(n).TTL(e.ctx); err != nil || ttl > 300*time.Millisecond {
			t.Errorf("TTL of %s = %v, %v; want the 300ms lease", n, ttl, err)
		}
	}
	select {
	case <-lc.Done():
	case <-time.After(ftPatience):
		t.Fatal("lock context did not end with the members' leases")
	}
	if cause := context.Cause(lc); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if err := ml.Unlock(lc); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Unlock after the leases ran out: %v, want ErrNotHeld", err)
	}
}
