package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// ltDropFixed takes a Mutex, an RWMutex write lock and a semaphore permit,
// each with a fixed lease, and drops their contexts.
//
//go:noinline
func ltDropFixed(t *testing.T, ctx context.Context, c *rlock.Client, lease time.Duration) {
	t.Helper()
	if _, err := c.Mutex("fixed-mutex").Lock(ctx, rlock.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex("fixed-rw").Lock(ctx, rlock.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	s := semaphore.New(c, "fixed-sem", semaphore.WithLimit(1))
	if _, err := s.Acquire(ctx, 1, semaphore.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
}

// A hold with a fixed lease (WithLease) whose lock context the program drops
// is left to its lease, not released at the next garbage collection: taking a
// lock and letting it expire is the idiom for "at most once per lease". It
// ends in the Client too when the lease runs out. A watchdog hold dropped at
// the same time is still released (the cleanups did run).
func TestDroppedFixedLeaseKeptUntilLease(t *testing.T) {
	e := ftNewEnv(t)
	logs, withLog := ltLogged()
	c := e.client(withLog)
	other := e.client()
	const lease = 8 * time.Second
	start := time.Now()
	ltDropFixed(t, e.ctx, c, lease)
	// A probe with the watchdog's lease, dropped after them: once the
	// collector has released it, it has had its chance at the others.
	ltDrop(t, c.Mutex("fixed-probe").Lock, e.ctx)
	ltCollected(t, "the watchdog probe released", func() bool { return strings.Contains(logs.String(), "lock=fixed-probe") })
	for range 3 {
		ltCollected(t, "a collection", func() bool { return true })
	}
	require.Eventually(t, func() bool { return !rlock.Holding(c, "fixed-probe") }, ftPatience, 10*time.Millisecond)

	held := func() error {
		if _, err := other.Mutex("fixed-mutex").TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
			return errors.New("Mutex: another Client's TryLock: " + errString(err))
		}
		if _, err := other.RWMutex("fixed-rw").TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
			return errors.New("RWMutex: another Client's TryLock: " + errString(err))
		}
		if _, err := semaphore.New(other, "fixed-sem").TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
			return errors.New("semaphore: another Client's TryAcquire: " + errString(err))
		}
		for _, key := range []string{e.lockKey("fixed-mutex"), e.lockKey("fixed-rw") + ":rw", e.lockKey("fixed-sem") + ":sem:permits"} {
			if pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(key).Build()).AsInt64(); err != nil || pttl <= 0 {
				return errors.New("PTTL " + key + ": " + time.Duration(pttl*int64(time.Millisecond)).String() + " " + errString(err))
			}
		}
		return nil
	}
	if err := held(); err != nil {
		t.Fatalf("%v after the dropped contexts were collected, %v into a lease of %v: want still held", err, time.Since(start), lease)
	}
	if out := logs.String(); strings.Contains(out, "lock=fixed-") && !strings.Contains(out, "lock=fixed-probe") || strings.Count(out, "was dropped") != 1 {
		t.Fatalf("a fixed-lease hold was released or logged at collection:\n%s", out)
	}
	// After the lease, the locks are free, and the Client has let the holds go.
	require.Eventually(t, func() bool {
		l, err := other.Mutex("fixed-mutex").TryLock(e.ctx)
		if err != nil {
			return false
		}
		_ = other.Mutex("fixed-mutex").Unlock(l)
		return true
	}, lease+ftPatience, 50*time.Millisecond, "Mutex free after the lease")
	require.Eventually(t, func() bool {
		l, err := other.RWMutex("fixed-rw").TryLock(e.ctx)
		if err != nil {
			return false
		}
		_ = other.RWMutex("fixed-rw").Unlock(l)
		return true
	}, ftPatience, 50*time.Millisecond, "RWMutex free after the lease")
	require.Eventually(t, func() bool {
		p, err := semaphore.New(other, "fixed-sem").TryAcquire(e.ctx, 1)
		if err != nil {
			return false
		}
		_ = semaphore.New(other, "fixed-sem").Release(p)
		return true
	}, ftPatience, 50*time.Millisecond, "semaphore permit free after the lease")
	require.Eventually(t, func() bool { return rlock.HoldCount(c) == 0 }, ftPatience, 10*time.Millisecond, "holds left in the Client")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
