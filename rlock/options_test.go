package rlock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// TestOptionBounds: duration options outside their documented range are
// rejected by New with an error naming the option, the value and the range;
// the bounds themselves are accepted.
func TestOptionBounds(t *testing.T) {
	e := ftNewEnv(t)
	rc := e.raw
	for _, tc := range []struct {
		name string
		opt  rlock.Option
		ok   bool
	}{
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(math.MaxInt64), false},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(rlock.MaxWatchdogTimeout + 1), false},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(10 * time.Millisecond), false},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(rlock.MinWatchdogTimeout - time.Millisecond), false},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(0), false},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(rlock.MinWatchdogTimeout), true},
		{"WithWatchdogTimeout", rlock.WithWatchdogTimeout(rlock.MaxWatchdogTimeout), true},
		{"WithUnlockTimeout", rlock.WithUnlockTimeout(math.MaxInt64), false},
		{"WithUnlockTimeout", rlock.WithUnlockTimeout(time.Millisecond), false},
		{"WithUnlockTimeout", rlock.WithUnlockTimeout(rlock.MaxUnlockTimeout), true},
		{"WithUnlockTimeout", rlock.WithUnlockTimeout(rlock.MinUnlockTimeout), true},
		{"WithNoExpiryPoll", rlock.WithNoExpiryPoll(math.MaxInt64), false},
		{"WithNoExpiryPoll", rlock.WithNoExpiryPoll(time.Nanosecond), false},
		{"WithNoExpiryPoll", rlock.WithNoExpiryPoll(rlock.MaxNoExpiryPoll), true},
		{"WithProbeTimeout", rlock.WithProbeTimeout(0), false},
		{"WithProbeTimeout", rlock.WithProbeTimeout(math.MaxInt64), false},
		{"WithProbeTimeout", rlock.WithProbeTimeout(rlock.MaxProbeTimeout), true},
		{"WithClaimWindow", rlock.WithClaimWindow(0), false},
		{"WithClaimWindow", rlock.WithClaimWindow(rlock.MaxClaimWindow + 1), false},
		{"WithClaimWindow", rlock.WithClaimWindow(rlock.MinClaimWindow), true},
		{"WithClaimWindow", rlock.WithClaimWindow(rlock.MaxClaimWindow), true},
	} {
		c, err := rlock.New(rc, rlock.WithKeyPrefix(e.prefix), tc.opt)
		if tc.ok {
			if err != nil {
				t.Errorf("New with %s at its bound: %v", tc.name, err)
			} else {
				_ = c.Close()
			}
			continue
		}
		if c != nil {
			_ = c.Close()
		}
		if !errors.Is(err, rlock.ErrInvalidLease) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "between") {
			t.Errorf("New with an out-of-range %s: err = %v, want ErrInvalidLease naming the option and its range", tc.name, err)
		}
	}

	// The message states the bound, so that a rejected value says what to use.
	_, err := rlock.New(rc, rlock.WithWatchdogTimeout(10*time.Millisecond))
	if want := "rlock: invalid lease: WithWatchdogTimeout(10ms) is out of range: must be between 300ms and 24h0m0s"; err == nil || err.Error() != want {
		t.Errorf("New WithWatchdogTimeout(10ms): %v, want %q", err, want)
	}
	// A watchdog hold handed a lock is claimed for at most the timeout: the
	// shortest timeout is no shorter than the shortest claim window.
	if rlock.MinWatchdogTimeout < rlock.MinClaimWindow {
		t.Errorf("MinWatchdogTimeout %v < MinClaimWindow %v", rlock.MinWatchdogTimeout, rlock.MinClaimWindow)
	}
}

// TestWaitTimeoutZeroOnEveryLock: WithWaitTimeout(0) is one attempt for every
// lock kind of a Client, as TryLock: on a lock held by another owner it fails
// at once with ErrLocked (a generous bound: nothing waits), and leaves
// nothing queued.
func TestWaitTimeoutZeroOnEveryLock(t *testing.T) {
	e := ftNewEnv(t)
	holder, other := e.client(), e.client()
	for what, lock := range map[string]func(c *rlock.Client) (context.Context, error){
		"Mutex.Lock": func(c *rlock.Client) (context.Context, error) {
			return c.Mutex("zero").Lock(e.ctx, rlock.WithWaitTimeout(0))
		},
		"FairMutex.Lock": func(c *rlock.Client) (context.Context, error) {
			return c.FairMutex("zero").Lock(e.ctx, rlock.WithWaitTimeout(0))
		},
		"RWMutex.Lock": func(c *rlock.Client) (context.Context, error) {
			return c.RWMutex("zero-rw").Lock(e.ctx, rlock.WithWaitTimeout(0))
		},
		"MultiLock.Lock": func(c *rlock.Client) (context.Context, error) {
			return c.MultiLock("zero", "zero-2").Lock(e.ctx, rlock.WithWaitTimeout(0))
		},
	} {
		held, err := lock(holder)
		if err != nil {
			t.Fatalf("%s WithWaitTimeout(0) on a free lock: %v", what, err)
		}
		start := time.Now()
		_, err = lock(other)
		if !errors.Is(err, rlock.ErrLocked) {
			t.Errorf("%s WithWaitTimeout(0) on a held lock: err = %v, want ErrLocked", what, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s WithWaitTimeout(0) on a held lock took %v: it waited", what, d)
		}
		// Held lock kinds differ; the writer's RWMutex Unlock is Unlock too.
		var uerr error
		switch what {
		case "RWMutex.Lock":
			uerr = holder.RWMutex("zero-rw").Unlock(held)
		case "MultiLock.Lock":
			uerr = holder.MultiLock("zero", "zero-2").Unlock(held)
		default:
			uerr = holder.Mutex("zero").Unlock(held)
		}
		if uerr != nil {
			t.Fatalf("%s: Unlock: %v", what, uerr)
		}
	}
	if members := e.sortedSetMembers(); len(members) != 0 {
		t.Errorf("one-attempt Locks left queue entries: %v", members)
	}
}

// TestLockOptionBounds: WithLease and WithWaitTimeout outside their range are
// rejected before anything is sent to Redis; WithWaitTimeout(0) is one
// attempt, not an error.
func TestLockOptionBounds(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	m := c.Mutex("bounds")
	for _, tc := range []struct {
		name string
		opt  rlock.LockOption
	}{
		{"WithLease", rlock.WithLease(math.MaxInt64)},
		{"WithLease", rlock.WithLease(rlock.MaxLease + time.Millisecond)},
		{"WithLease", rlock.WithLease(500 * time.Microsecond)},
		{"WithWaitTimeout", rlock.WithWaitTimeout(-time.Nanosecond)},
		{"WithWaitTimeout", rlock.WithWaitTimeout(math.MaxInt64)},
	} {
		for what, lock := range map[string]func() error{
			"Lock":    func() error { _, err := m.Lock(e.ctx, tc.opt); return err },
			"TryLock": func() error { _, err := m.TryLock(e.ctx, tc.opt); return err },
		} {
			if err := lock(); !errors.Is(err, rlock.ErrInvalidLease) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s with an out-of-range %s: err = %v, want ErrInvalidLease naming the option", what, tc.name, err)
			}
		}
	}
	if e.exists(e.lockKey("bounds")) {
		t.Fatal("rejected options left the lock taken")
	}

	// The largest lease is accepted and reaches Redis intact.
	lc, err := m.Lock(e.ctx, rlock.WithLease(rlock.MaxLease))
	if err != nil {
		t.Fatalf("Lock WithLease(MaxLease): %v", err)
	}
	if d, err := m.TTL(e.ctx); err != nil || d < rlock.MaxLease-time.Minute || d > rlock.MaxLease {
		t.Errorf("TTL with WithLease(MaxLease) = %v, %v; want about %v", d, err, rlock.MaxLease)
	}

	// WithWaitTimeout(0): one attempt. Held by another owner, it fails at
	// once with ErrLocked (a generous bound: nothing waits).
	other := e.client().Mutex("bounds")
	start := time.Now()
	if _, err := other.Lock(e.ctx, rlock.WithWaitTimeout(0)); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("Lock WithWaitTimeout(0) on a held lock: err = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lock WithWaitTimeout(0) on a held lock took %v: it waited", d)
	}
	if err := m.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	// Free, it takes the lock.
	lc, err = other.Lock(e.ctx, rlock.WithWaitTimeout(0))
	if err != nil {
		t.Fatalf("Lock WithWaitTimeout(0) on a free lock: %v", err)
	}
	if err := other.Unlock(lc); err != nil {
		t.Fatal(err)
	}
}

// TestKeyPrefixValidation: New refuses, with an error matching ErrInvalidName
// that says why, a key prefix no ACL pattern could confine a Redis user to:
// "" and the glob characters of ACL patterns (as it refuses braces). A ':'
// is allowed, and a lock's keys then live under "<prefix>:{name}", apart from
// those of the shorter prefix.
func TestKeyPrefixValidation(t *testing.T) {
	e := ftNewEnv(t)
	for _, tc := range []struct{ prefix, want string }{
		{"", "empty key prefix"},
		{"tenant*", `'*'`},
		{"tenant?", `'?'`},
		{"tenant[12]", `'['`},
		{"tenant]", `']'`},
		{`tenant\*`, `'\\'`},
		{"tenant{a}", "brace"},
	} {
		c, err := rlock.New(e.raw, rlock.WithKeyPrefix(tc.prefix))
		if c != nil {
			_ = c.Close()
		}
		if !errors.Is(err, rlock.ErrInvalidName) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with WithKeyPrefix(%q): err = %v, want ErrInvalidName saying %s", tc.prefix, err, tc.want)
		}
	}

	nested := e.prefix + ":eu"
	outer, inner := e.clientOn(e.raw), e.clientOn(e.raw, rlock.WithKeyPrefix(nested))
	lockCtx, err := inner.Mutex("orders").Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock under prefix %q: %v", nested, err)
	}
	defer func() { _ = inner.Mutex("orders").Unlock(lockCtx) }()
	if n, err := e.raw.Do(e.ctx, e.raw.B().Exists().Key(nested+":{orders}").Build()).AsInt64(); err != nil || n != 1 {
		t.Errorf("EXISTS %s:{orders} = %d, %v; want the lock there", nested, n, err)
	}
	// The shorter prefix's lock of the same name is another lock.
	otherCtx, err := outer.Mutex("orders").TryLock(e.ctx)
	if err != nil {
		t.Fatalf("TryLock of orders under prefix %q while %q holds its own: %v", e.prefix, nested, err)
	}
	if err := outer.Mutex("orders").Unlock(otherCtx); err != nil {
		t.Error(err)
	}
}
