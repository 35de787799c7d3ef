package rlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
)

// TestClusterHolderKeepsLockThroughSlowFailover: the master of a held
// lock's slot is killed between two watchdog rounds, with the default 30s
// watchdog and a production-like 15s cluster-node-timeout, so its replica is
// promoted some 16-23s later, with the lock (replicated long before). The
// last confirmed lease runs out 28s after the kill: the renewals that fail
// meanwhile must be retried soon enough after the promotion for the holder
// to keep a lock the new master has, instead of waiting for the next round.
func TestClusterHolderKeepsLockThroughSlowFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t, 3, 1, redistest.WithArgs("--cluster-node-timeout", "15000"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	x := clusterClient(t, cl, prefix) // the default 30s watchdog
	wd := watchdogOf(t, x)
	const name = "slow-failover"
	lockCtx, err := x.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = x.Mutex(name).Unlock(lockCtx) }()
	r := waitRounds(ctx, t, wd, 0, 1)
	roundAt := time.Now()
	t.Logf("round %d renewed %d holds", r.N, r.Holds)
	// 2s after a round: the last confirmed lease ends 28s after the kill,
	// when the round after next is due (too late), and the round in
	// between fails too, as its node is dead or rueidis's slot map, last
	// refreshed after the first failure, still names it. Without retries
	// within the period the lock is lost wherever the kill falls in the
	// cycle; closer to the next round the failover itself (16-23s here on a
	// loaded machine) could outlast the lease in Redis too.
	select {
	case <-time.After(2*time.Second - time.Since(roundAt)):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	killed := time.Now()
	_, promoted, err := cl.KillPrimary(ctx, int64(slot.Of("{"+name+"}")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted %s %v after the kill", promoted, time.Since(killed))
	eventually(t, 28*time.Second-time.Since(killed), "the holder never renewed on the new master", func() bool {
		msg, err := promoted.Do(ctx, "PTTL", prefix+":{"+name+"}")
		ms, _ := msg.AsInt64()
		return err == nil && ms > 25000
	})
	if err := context.Cause(lockCtx); err != nil {
		t.Fatalf("the holder lost a lock the new master has: %v", err)
	}
	t.Logf("renewed on the new master %v after the kill", time.Since(killed))
}
