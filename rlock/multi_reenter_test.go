package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// A MultiLock call with WithLease that re-enters a member the caller holds
// already leaves that hold's lease as it was: here a watchdog hold, still
// renewed after the call failed on another member. (The re-entry put the
// outer hold on the call's fixed 500ms lease, for good: it ended 0.5s
// later, with ErrLeaseLost.)
func TestMultiLockReentryKeepsTheOuterLease(t *testing.T) {
	e := ftNewEnv(t)
	const lease = 500 * time.Millisecond
	c, other := e.client(rlock.WithWatchdogTimeout(time.Second)), e.client()
	held := ftLock(t, e.ctx, c.Mutex("outer"))
	taken := ftLock(t, e.ctx, other.Mutex("taken"))
	defer mustUnlockFT(t, other.Mutex("taken"), taken)
	if _, err := c.MultiLock("outer", "taken").TryLock(held, rlock.WithLease(lease)); !errors.Is(err, rlock.ErrLocked) {
		t.Fatalf("MultiLock.TryLock with a member taken: %v, want ErrLocked", err)
	}
	select { // a negative check: three of the call's leases
	case <-held.Done():
		t.Fatalf("the caller's own watchdog hold ended after a failed MultiLock call: %v", context.Cause(held))
	case <-time.After(3 * lease):
	}
	mustUnlockFT(t, c.Mutex("outer"), held)
}
