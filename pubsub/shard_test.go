package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// shardChannels returns one channel per master of c, named under prefix.
func shardChannels(ctx context.Context, t *testing.T, c *redistest.Cluster, prefix string) map[*redistest.Server]string {
	t.Helper()
	chans := map[*redistest.Server]string{}
	for i := 0; len(chans) < len(c.Masters) && i < 1000; i++ {
		ch := fmt.Sprintf("%s{n%d}:unlock", prefix, i)
		slot, err := c.KeySlot(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		owner, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := chans[owner]; !ok {
			chans[owner] = ch
		}
	}
	return chans
}

func shardNumSub(ctx context.Context, t *testing.T, s *redistest.Server, ch string) int64 {
	t.Helper()
	msg, err := s.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch)
	if err != nil {
		t.Fatal(err)
	}
	arr, err := msg.ToArray()
	if err != nil || len(arr) != 2 {
		t.Fatalf("SHARDNUMSUB: %v %v", arr, err)
	}
	n, _ := arr[1].AsInt64()
	return n
}

// On a 3-master cluster the Multiplexer subscribes each channel with
// SSUBSCRIBE on the master owning its slot, and SPUBLISH reaches it there.
func TestShardedAcrossMasters(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc)
	if sharded, err := m.Sharded(ctx); err != nil || !sharded {
		t.Fatalf("Sharded = %v, %v; want true on a Redis 7 cluster", sharded, err)
	}
	if got := m.PublishCommand(ctx); got != "SPUBLISH" {
		t.Fatalf("PublishCommand = %q", got)
	}
	prefix := redistest.KeyPrefix(t)
	chans := shardChannels(ctx, t, c, prefix)
	if len(chans) != 3 {
		t.Fatalf("channels on %d masters, want 3", len(chans))
	}
	waiters := map[string]*pubsub.Waiter{}
	for owner, ch := range chans {
		waiters[ch] = mxSubscribe(ctx, t, m, ch)
		if n := shardNumSub(ctx, t, owner, ch); n != 1 {
			t.Errorf("%s on its owner %s: SHARDNUMSUB %d, want 1", ch, owner, n)
		}
		for _, other := range c.Masters {
			if other != owner && shardNumSub(ctx, t, other, ch) != 0 {
				t.Errorf("%s subscribed on %s, not its owner", ch, other)
			}
		}
	}
	for _, ch := range chans {
		n, err := rc.Do(ctx, rc.B().Spublish().Channel(ch).Message("1").Build()).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("SPUBLISH %s: %d receivers, %v; want 1", ch, n, err)
		}
		mxWaitFired(t, waiters[ch], ch)
		waiters[ch].Leave(true)
	}
}

// Forcing classic pub/sub on a cluster client subscribes with SUBSCRIBE.
func TestShardingForcedClassic(t *testing.T) {
	c := redistest.NewCluster(t, 1, 0)
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc, pubsub.WithSharding(pubsub.ShardingClassic))
	if got := m.PublishCommand(ctx); got != "PUBLISH" {
		t.Fatalf("PublishCommand = %q, want PUBLISH", got)
	}
	ch := redistest.KeyPrefix(t) + "{x}"
	w := mxSubscribe(ctx, t, m, ch)
	defer w.Leave(true)
	if mxPublish(ctx, t, rc, ch, "1") != 1 {
		t.Fatal("PUBLISH reached no subscriber")
	}
	mxWaitFired(t, w, "classic")
	if _, err := pubsub.New(redistest.Client(t, c.Masters[0]), pubsub.WithSharding(pubsub.ShardingSharded)); err == nil {
		t.Fatal("forced sharding on a standalone client: no error")
	}
}

// When a channel's slot migrates to another master, Redis drops the
// subscription (sunsubscribe): the Waiter is woken at once, the channel is
// subscribed on the new owner, and SPUBLISH there reaches it.
func TestShardedSlotMigration(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc)
	ch := redistest.KeyPrefix(t) + "{moving}:unlock"
	slot, _, to, err := c.SlotToMove(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	w := mxSubscribe(ctx, t, m, ch)
	defer w.Leave(true)
	start := time.Now()
	if err := c.MoveSlot(ctx, slot, to, nil); err != nil {
		t.Fatal(err)
	}
	mxWaitFired(t, w, "slot moved")
	t.Logf("woken %v after the migration started", time.Since(start))
	mxEventually(t, mxPatience, func() (bool, string) {
		n := shardNumSub(ctx, t, to, ch)
		return n == 1 && w.Live(), fmt.Sprintf("SHARDNUMSUB on the new owner %d, live %v", n, w.Live())
	})
	// Drop a wake given once resubscribed (it may have merged with the
	// first), then publish through the cluster client (which follows MOVED
	// to the new owner).
	mxFired(w)
	n, err := rc.Do(ctx, rc.B().Spublish().Channel(ch).Message("1").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("SPUBLISH after the move: %d receivers, %v", n, err)
	}
	mxWaitFired(t, w, "after the move")
	if s := m.Stats(); s.Channels != 1 {
		t.Errorf("stats %+v", s)
	}
}

// On a cluster with replicas every channel is subscribed on its slot's
// master, never on a replica (which accepts SSUBSCRIBE for its master's
// slots and receives what the master publishes, but SPUBLISH on the master
// counts its subscribers only: a hand-off would be counted undelivered while
// it arrives). After a failover the channel moves to the new master, not to
// the demoted one. The same holds when the rueidis client sends reads to
// replicas (SendToReplicas), whose connections to replicas are READONLY and
// so answer a keyed read for their master's slots instead of MOVED.
func TestShardedOnMastersNotReplicas(t *testing.T) {
	t.Run("default", func(t *testing.T) { testShardedOnMasters(t) })
	t.Run("SendToReplicas", func(t *testing.T) {
		testShardedOnMasters(t, func(o *rueidis.ClientOption) {
			o.SendToReplicas = func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
		})
	})
}

func testShardedOnMasters(t *testing.T, opts ...func(*rueidis.ClientOption)) {
	c := redistest.NewCluster(t, 3, 1)
	ctx := mxContext(t)
	rc := redistest.ClusterClientWithReplicas(t, c, opts...)
	m := mxNew(t, rc)
	prefix := redistest.KeyPrefix(t)
	chans := shardChannels(ctx, t, c, prefix)
	waiters := map[string]*pubsub.Waiter{}
	onMaster := func(owner *redistest.Server, ch string) {
		t.Helper()
		for _, s := range c.Nodes() {
			want := int64(0)
			if s == owner {
				want = 1
			}
			if n := shardNumSub(ctx, t, s, ch); n != want {
				t.Errorf("%s: SHARDNUMSUB on %s = %d, want %d (owner %s)", ch, s, n, want, owner)
			}
		}
		// Published on the owner itself: right after a failover the cluster
		// client's slot map may still name the demoted master, which as a
		// replica would take the SPUBLISH and count its own subscribers only.
		reply, err := owner.Do(ctx, "SPUBLISH", ch, "1")
		n, _ := reply.AsInt64()
		if err != nil || n != 1 {
			t.Errorf("SPUBLISH %s: %d receivers, %v; want 1", ch, n, err)
		}
		mxWaitFired(t, waiters[ch], ch)
	}
	for owner, ch := range chans {
		waiters[ch] = mxSubscribe(ctx, t, m, ch)
		defer waiters[ch].Leave(true)
		onMaster(owner, ch)
	}
	for _, ch := range chans {
		slot, err := c.KeySlot(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		_, promoted, err := c.Failover(ctx, slot, "")
		if err != nil {
			t.Fatal(err)
		}
		mxWaitFired(t, waiters[ch], "failed over")
		mxEventually(t, mxPatience, func() (bool, string) {
			n := shardNumSub(ctx, t, promoted, ch)
			return n == 1 && waiters[ch].Live(), fmt.Sprintf("SHARDNUMSUB on the new master %d, live %v", n, waiters[ch].Live())
		})
		mxFired(waiters[ch])
		onMaster(promoted, ch)
	}
}
