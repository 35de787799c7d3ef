package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// A 3-master cluster forms, a cluster client routes keys to all of them, and
// every slot has an owner among the masters.
func TestCluster(t *testing.T) {
	c := NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := ClusterClient(t, c)
	if rc.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("mode %v, want cluster", rc.Mode())
	}
	owners := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := rc.Do(ctx, rc.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		slot, err := c.KeySlot(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		owners[o.Addr()] = true
	}
	if len(owners) != 3 {
		t.Errorf("keys landed on %d masters, want 3", len(owners))
	}
	for _, m := range c.Masters {
		info, err := c.Info(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if info["cluster_known_nodes"] != "3" || info["cluster_size"] != "3" {
			t.Errorf("%s: %v", m, info)
		}
	}
}

// A cluster with replicas starts with every replica in sync; a shard fails
// over on demand (CLUSTER FAILOVER FORCE) and by losing its master (killed),
// the killed master rejoins as a replica of the promoted one, and blocked
// replication keeps a write from the replica until it is allowed again.
func TestClusterFailoverHelpers(t *testing.T) {
	c := NewCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, m := range c.Masters {
		rs, err := c.ReplicasOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0] != c.Replicas[i][0] {
			t.Fatalf("replicas of %s: %v, want %v", m, rs, c.Replicas[i])
		}
		if r, err := c.Role(ctx, rs[0]); err != nil || r.State != "connected" {
			t.Fatalf("%s: role %+v %v, want in sync", rs[0], r, err)
		}
	}
	slot, err := c.KeySlot(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	old, promoted, err := c.Failover(ctx, slot, "FORCE")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CLUSTER FAILOVER FORCE: %s took over from %s in %v (old master in sync as its replica)", promoted, old, time.Since(start))

	// Blocked replication: a write stays on the master.
	if err := c.BlockReplication(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if _, err := promoted.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if n := dbSize(ctx, t, old); n != 0 {
		t.Fatalf("the replica has %d keys while replication was blocked, want 0", n)
	}
	if err := c.AllowReplication(ctx, promoted, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitSynced(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if n := dbSize(ctx, t, old); n != 1 {
		t.Fatalf("the replica has %d keys once in sync again, want 1", n)
	}

	start = time.Now()
	killed, taker, err := c.KillPrimary(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if killed != promoted || taker != old {
		t.Fatalf("killed %s, %s took over; want %s killed and %s taking over", killed, taker, promoted, old)
	}
	t.Logf("killed %s: %s took over in %v", killed, taker, time.Since(start))
	if n := dbSize(ctx, t, taker); n != 1 {
		t.Fatalf("the promoted replica has %d keys, want 1", n)
	}
	start = time.Now()
	master, err := c.Rejoin(ctx, killed)
	if err != nil {
		t.Fatal(err)
	}
	if master != taker {
		t.Fatalf("%s rejoined as a replica of %s, want %s", killed, master, taker)
	}
	t.Logf("%s rejoined as a replica in sync in %v", killed, time.Since(start))
}

func dbSize(ctx context.Context, t *testing.T, s *Server) int64 {
	t.Helper()
	msg, err := s.Do(ctx, "DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := msg.AsInt64()
	return n
}
