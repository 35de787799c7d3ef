package rlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// clusterNames returns one lock name per master of c (base prefix:{name}).
func clusterNames(ctx context.Context, t *testing.T, c *redistest.Cluster) []string {
	t.Helper()
	seen := map[*redistest.Server]bool{}
	var names []string
	for i := 0; len(names) < len(c.Masters) && i < 1000; i++ {
		n := "shard" + strconv.Itoa(i)
		slot, err := c.KeySlot(ctx, "{"+n+"}")
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !seen[o] {
			seen[o] = true
			names = append(names, n)
		}
	}
	return names
}

func clusterClient(t *testing.T, c *redistest.Cluster, prefix string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	cl, err := rlock.New(redistest.ClusterClient(t, c), append([]rlock.Option{rlock.WithKeyPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func clusterInfoInt(ctx context.Context, t *testing.T, c *redistest.Cluster, s *redistest.Server, field string) int64 {
	t.Helper()
	info, err := c.Info(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(info[field], 10, 64)
	return n
}

// Mutexes and semaphores spread over the 3 masters of a cluster, contended
// by two Clients: never two holders (or more than the limit), every wait
// ends promptly (no lease ran out: messages arrived), every unlock message
// was SPUBLISHed in its shard, none PUBLISHed, and the cluster bus carried
// no publish message (classic pub/sub would broadcast each to every node).
func TestClusterShardedContention(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	names := clusterNames(ctx, t, c)
	if len(names) != 3 {
		t.Fatalf("names on %d masters", len(names))
	}
	// Every channel of a lock shares its slot: SPUBLISH from its scripts is legal.
	for _, n := range names {
		base := prefix + ":{" + n + "}"
		want, _ := c.KeySlot(ctx, base)
		for _, ch := range []string{base + ":unlock", base + ":to:client-id", base + ":rw:read"} {
			if got, _ := c.KeySlot(ctx, ch); got != want {
				t.Fatalf("%s in slot %d, its lock in %d", ch, got, want)
			}
		}
	}
	busBefore := map[*redistest.Server]int64{}
	for _, m := range c.Masters {
		if _, err := m.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		busBefore[m] = clusterInfoInt(ctx, t, c, m, "cluster_stats_messages_publish_sent")
	}
	// A long lease: a missed message would show as a wait of seconds.
	// x runs the scripts as Redis functions, y by EVALSHA: both ways on
	// each master, on the same locks.
	x := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(20*time.Second), rlock.WithRedisFunctions(true))
	y := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(20*time.Second))
	var violations, slow atomic.Int64
	var wg sync.WaitGroup
	for _, n := range names {
		var inside atomic.Int64
		var permits atomic.Int64
		for g := range 4 {
			cl := x
			if g%2 == 1 {
				cl = y
			}
			wg.Go(func() {
				m := cl.Mutex(n)
				for range 5 {
					start := time.Now()
					l, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if time.Since(start) > 5*time.Second {
						slow.Add(1)
					}
					if inside.Add(1) != 1 {
						violations.Add(1)
					}
					inside.Add(-1)
					if err := m.Unlock(l); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				s := semaphore.New(cl, n+"-sem", semaphore.WithLimit(2))
				for range 5 {
					start := time.Now()
					p, err := s.Acquire(ctx, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if time.Since(start) > 5*time.Second {
						slow.Add(1)
					}
					if permits.Add(1) > 2 {
						violations.Add(1)
					}
					permits.Add(-1)
					if err := s.Release(p); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Errorf("%d exclusion violations", v)
	}
	if s := slow.Load(); s != 0 {
		t.Errorf("%d waits took over 5s (a wake-up was missed)", s)
	}
	var spublish int64
	for _, m := range c.Masters {
		stats, err := m.CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stats["publish"] != 0 {
			t.Errorf("%s: %d PUBLISH calls, want 0 in sharded mode", m, stats["publish"])
		}
		spublish += stats["spublish"]
		// x's scripts ran as functions there (each master got a library
		// when a call first found it missing), y's by EVALSHA.
		if stats["fcall"] == 0 || stats["function|load"] == 0 || stats["evalsha"] == 0 {
			t.Errorf("%s: %d FCALLs, %d FUNCTION LOADs and %d EVALSHAs, want some of each", m, stats["fcall"], stats["function|load"], stats["evalsha"])
		}
		if d := clusterInfoInt(ctx, t, c, m, "cluster_stats_messages_publish_sent") - busBefore[m]; d != 0 {
			t.Errorf("%s: %d publish messages on the cluster bus, want 0", m, d)
		}
	}
	if spublish == 0 {
		t.Error("no SPUBLISH anywhere: the contention never published")
	}
	t.Logf("SPUBLISH calls: %d; cluster bus publish messages: 0", spublish)
}

// A waiter blocks on a Mutex whose slot then migrates to another master
// (keys moved with MIGRATE): its subscription is dropped by Redis and made
// again on the new owner, so it gets the lock promptly once the holder
// unlocks, not after a lease.
func TestClusterSlotMigrationWhileWaiting(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	name := "migrating"
	base := prefix + ":{" + name + "}"
	slot, from, to, err := c.SlotToMove(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	x := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(20*time.Second))
	y := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(20*time.Second))
	lx, err := x.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ly, err := y.Mutex(name).Lock(ctx)
		if err == nil {
			err = y.Mutex(name).Unlock(ly)
		}
		got <- err
	}()
	deadline := time.Now().Add(ftPatience)
	for {
		keys, err := from.Keys(ctx, base+":queue")
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
	if err := c.MoveSlot(ctx, slot, to, nil); err != nil {
		t.Fatal(err)
	}
	if keys, _ := to.Keys(ctx, base+"*"); len(keys) == 0 {
		t.Fatal("the lock's keys did not move")
	}
	// Let the waiter resubscribe on the new owner (it is woken, re-checks,
	// and waits again), then release.
	deadline = time.Now().Add(ftPatience)
	for {
		msg, err := to.Do(ctx, "PUBSUB", "SHARDCHANNELS", base+"*")
		if err != nil {
			t.Fatal(err)
		}
		if chs, _ := msg.AsStrSlice(); len(chs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not subscribe on the new owner")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	unlocked := time.Now()
	if err := x.Mutex(name).Unlock(lx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("y got the lock %v after the unlock on the new owner", time.Since(unlocked))
	case <-time.After(5 * time.Second):
		t.Fatal("y did not get the lock within 5s of the unlock (lease 20s)")
	}
}
