package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestSentinelPlannedFailoverWaiterServedByRelease: after a planned failover
// (SENTINEL FAILOVER) the old master stays a master until the Sentinels
// demote it, seconds later. A waiter's multiplexer must still move to the
// new master within about a second of its client seeing it, so that the
// holder's Unlock there hands it the lock, rather than counting no listener
// and leaving the waiter to its lease-bound re-check (6s or more here).
func TestSentinelPlannedFailoverWaiterServedByRelease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	opts := []rlock.Option{rlock.WithWatchdogTimeout(10 * time.Second)}
	holderRC, waiterRC := redistest.SentinelClient(t, g), redistest.SentinelClient(t, g)
	holder, waiter := newRCClient(t, holderRC, opts...), newRCClient(t, waiterRC, opts...)
	const name = "sentinel-planned"
	lockKey := "rlock:{" + name + "}"

	lockCtx, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ctx context.Context
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := waiter.Mutex(name).Lock(ctx)
		got <- result{c, err}
	}()
	first := g.Servers[0]
	eventually(t, 5*time.Second, "the waiter never subscribed", func() bool {
		n, _ := first.Subscribers(ctx, lockKey+":to:*")
		return n >= 1
	})
	// The replica has the lock and the queue before the failover.
	waitReplicated(t, ctx, first)

	promoted, err := g.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follows := func(rc rueidis.Client) bool { return rc.Nodes()[promoted.Addr()] != nil }
	eventually(t, 10*time.Second, "the clients never followed the new master", func() bool {
		return follows(holderRC) && follows(waiterRC)
	})
	seen := time.Now()
	eventually(t, 3*time.Second, "the waiter's multiplexer stayed on the old master", func() bool {
		n, _ := promoted.Subscribers(ctx, lockKey+":to:*")
		return n >= 1
	})
	t.Logf("the multiplexer moved %v after the client followed the new master", time.Since(seen))
	select {
	case r := <-got:
		t.Fatalf("the waiter got the lock while it was held: %v", r.err)
	default:
	}
	if err := holder.Mutex(name).Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	unlocked := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("the waiter got the lock %v after Unlock", time.Since(unlocked))
		if err := waiter.Mutex(name).Unlock(r.ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not handed the lock within 3s of Unlock (its re-check is 6s or more away)")
	}
}

func newRCClient(t *testing.T, rc rueidis.Client, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	c, err := rlock.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
