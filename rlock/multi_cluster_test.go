package rlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// A MultiLock whose members live in different Redis Cluster slots, on a
// one-node cluster that refuses any script across slots (CROSSSLOT): each
// member is taken by its own script, all are held together, a second Client
// waits for the set (pub/sub per member, across slots) and gets it when the
// first unlocks, and each member's lease is renewed (one script per hold).
func TestMultiLockAcrossClusterSlots(t *testing.T) {
	srv := redistest.Owned(t, redistest.WithArgs("--cluster-enabled", "yes"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := redistest.Client(t, srv)
	if err := admin.Do(ctx, admin.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(0, 16383).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(ftPatience)
	for {
		info, err := admin.Do(ctx, admin.B().ClusterInfo().Build()).ToString()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %q, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	names := []string{"slot-one", "slot-two", "slot-three"}
	slots := map[int64]bool{}
	for _, n := range names {
		s, err := admin.Do(ctx, admin.B().ClusterKeyslot().Key(prefix+":{"+n+"}").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		slots[s] = true
	}
	if len(slots) != len(names) {
		t.Fatalf("the names share slots (%v); pick others", slots)
	}
	// No script may touch two members' keys here.
	err := admin.Do(ctx, admin.B().Eval().Script("return redis.call('EXISTS', KEYS[1], KEYS[2])").Numkeys(2).
		Key(prefix+":{"+names[0]+"}", prefix+":{"+names[1]+"}").Build()).Error()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script across the members' slots: %v, want CROSSSLOT", err)
	}

	newClient := func() *rlock.Client {
		rc := redistest.Client(t, srv, func(o *rueidis.ClientOption) { o.ForceSingleClient = false })
		if rc.Mode() != rueidis.ClientModeCluster {
			t.Fatalf("rueidis client mode %v, want cluster", rc.Mode())
		}
		c, err := rlock.New(rc, rlock.WithKeyPrefix(prefix), rlock.WithWatchdogTimeout(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, y := newClient(), newClient()
	lx, err := x.MultiLock(names...).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		l, err := y.MultiLock(names[2], names[0], names[1]).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// y waits in a member's queue; meanwhile each member of x's is renewed
	// (every 200ms: without renewals the 600ms leases would run out).
	deadline = time.Now().Add(ftPatience)
	for {
		keys, err := srv.Keys(ctx, prefix+"*:queue")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("y not queued")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	select {
	case <-lx.Done():
		t.Fatalf("x's hold ended: %v", context.Cause(lx))
	case <-got:
		t.Fatal("y got the set while x held it")
	case <-time.After(time.Second):
	}
	tx, _ := x.MultiLock(names...).Tokens(lx)
	if err := x.MultiLock(names...).Unlock(lx); err != nil {
		t.Fatal(err)
	}
	var ly context.Context
	select {
	case ly = <-got:
	case <-time.After(ftPatience):
		t.Fatal("y did not get the set after x unlocked it")
	}
	if ly == nil {
		t.FailNow()
	}
	ty, _ := y.MultiLock(names...).Tokens(ly)
	for _, n := range names {
		if ty[n] <= tx[n] {
			t.Errorf("token of %s: y has %d, not above x's %d", n, ty[n], tx[n])
		}
	}
	if err := y.MultiLock(names...).Unlock(ly); err != nil {
		t.Fatal(err)
	}
}
