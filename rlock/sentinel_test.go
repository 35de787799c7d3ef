package rlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Tests through Redis Sentinel: a master, a replica and three Sentinels of
// this process (redistest.SentinelGroup), reached through rueidis's Sentinel
// client, which follows failovers.

// sentinelClient is an rlock Client on its own Sentinel rueidis client (as a
// separate process would have), both closed at cleanup.
func sentinelClient(t *testing.T, g *redistest.SentinelGroup, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	c, err := rlock.New(redistest.SentinelClient(t, g), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually polls cond every 20ms until it holds or d runs out (polling with
// a deadline, not synchronisation).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exists(t *testing.T, s *redistest.Server, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := s.Do(ctx, "EXISTS", key)
	if err != nil {
		t.Fatalf("EXISTS %s on %s: %v", key, s, err)
	}
	n, _ := msg.AsInt64()
	return n == 1
}

// TestSentinelMutexAndSemaphore: contended Lock/Unlock from two Clients and a
// semaphore's Acquire/Release, all through the Sentinel client, exclude as on
// a single server.
func TestSentinelMutexAndSemaphore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	clients := []*rlock.Client{sentinelClient(t, g), sentinelClient(t, g)}

	var inside, overlaps, done atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		m := clients[i%2].Mutex("sentinel-mutex")
		wg.Go(func() {
			for range 10 {
				lockCtx, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := m.Unlock(lockCtx); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 || done.Load() != 80 {
		t.Fatalf("%d overlaps, %d of 80 holds", overlaps.Load(), done.Load())
	}

	sems := []*semaphore.Semaphore{
		semaphore.New(clients[0], "sentinel-sem", semaphore.WithLimit(2)),
		semaphore.New(clients[1], "sentinel-sem", semaphore.WithLimit(2)),
	}
	for i := range 6 {
		s := sems[i%2]
		wg.Go(func() {
			for range 5 {
				permit, err := s.Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 2 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := s.Release(permit); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d times more than 2 permits were held", overlaps.Load())
	}
}

// TestSentinelFailoverHolderAndWaiter kills the master while one Client holds
// a lock and another waits for it. The lock was replicated (WAIT, below), so
// the promoted replica has it: the holder's watchdog renews it there, the
// waiter's multiplexer reconnects to the new master, and the holder's Unlock
// hands the lock to the waiter.
func TestSentinelFailoverHolderAndWaiter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	// A lease (10s, renewed every 3.3s) that outlasts the failover (2-4s
	// here) after the last renewal before it: the holder then keeps the lock.
	// (With a lease shorter than that its lock context is cancelled with
	// ErrLeaseLost, and the new master frees the lock when the lease ends.)
	opts := []rlock.Option{rlock.WithWatchdogTimeout(10 * time.Second)}
	holder, waiter := sentinelClient(t, g, opts...), sentinelClient(t, g, opts...)
	const name = "sentinel-failover"
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
	// Make sure the replica has the lock and the waiter's place: a write
	// acknowledged by it covers everything before it.
	waitReplicated(t, ctx, first)

	start := time.Now()
	_, promoted, err := g.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start))
	if !exists(t, promoted, lockKey) {
		t.Fatal("the promoted replica lost a replicated lock")
	}
	// The watchdog renews on the new master: the lease there goes back up
	// to ~10s (it only falls while no renewal arrives).
	eventually(t, 8*time.Second, "the holder's watchdog never renewed on the new master", func() bool {
		msg, err := promoted.Do(ctx, "PTTL", lockKey)
		if err != nil {
			return false
		}
		ms, _ := msg.AsInt64()
		return ms > 9000
	})
	if err := context.Cause(lockCtx); err != nil {
		t.Fatalf("the holder lost a lock the new master has: %v", err)
	}
	// The waiter's multiplexer follows the master (its connection to the
	// killed one broke).
	eventually(t, 8*time.Second, "the waiter's multiplexer did not resubscribe on the new master", func() bool {
		n, _ := promoted.Subscribers(ctx, lockKey+":to:*")
		return n >= 1 && waiter.PubSubStats().Reconnects >= 1
	})
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
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock within 10s of Unlock")
	}
}

// detachReplica stops the replica following the master (REPLICAOF NO ONE),
// standing for a replication link that lags behind: writes to the master
// from now on do not reach it. The Sentinels still see it as the replica
// until they next look (every 10s), long after the tests below are done.
func detachReplica(t *testing.T, ctx context.Context, g *redistest.SentinelGroup) {
	t.Helper()
	if _, err := g.Servers[1].Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
}

// TestSentinelUnacknowledgedLockLost shows, deterministically, what Redis's
// asynchronous replication costs a lock without WithReplicaAck: a lock the
// master granted but the replica never received is gone after a failover,
// and another Client takes it while the first still believes it holds it.
// (The first learns of it at its next renewal: ErrLeaseLost.) With
// WithReplicaAck the same acquisition fails with ErrNotReplicated instead.
func TestSentinelUnacknowledgedLockLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	opts := []rlock.Option{rlock.WithWatchdogTimeout(time.Second)}
	first, second := sentinelClient(t, g, opts...), sentinelClient(t, g, opts...)
	acked := sentinelClient(t, g, append(opts, rlock.WithReplicaAck(1, 200*time.Millisecond))...)
	const name = "sentinel-lost"

	detachReplica(t, ctx, g)
	_, err := acked.Mutex(name).Lock(ctx)
	if !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("Lock with WithReplicaAck and no replica following = %v, want ErrNotReplicated", err)
	}
	lockCtx, err := first.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	// The second Client's rueidis client follows the new master, where the
	// lock never was.
	var secondCtx context.Context
	eventually(t, 8*time.Second, "the second Client never got the lock lost in the failover", func() bool {
		secondCtx, err = second.Mutex(name).TryLock(ctx)
		return err == nil
	})
	t.Log("two Clients believe they hold the lock; only fencing tokens tell them apart")
	select {
	case <-lockCtx.Done():
		if !errors.Is(context.Cause(lockCtx), rlock.ErrLeaseLost) {
			t.Fatalf("the first holder's cause = %v, want ErrLeaseLost", context.Cause(lockCtx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first holder never learned of its loss")
	}
	if err := second.Mutex(name).Unlock(secondCtx); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaAckAcknowledged: with WithReplicaAck, Lock returns once the
// replica has the lock (WAIT ran and the replica has the key), re-entry and
// a hand-off included.
func TestReplicaAckAcknowledged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	master, replica := g.Servers[0], g.Servers[1]
	opts := []rlock.Option{rlock.WithReplicaAck(1, 2*time.Second)}
	c1 := newAckClient(t, master, opts...)
	c2 := newAckClient(t, master, opts...)
	const name = "ack-ok"
	lockKey := "rlock:{" + name + "}"

	lockCtx, err := c1.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Replicas do not answer for keys before they are told; the key being
	// there right after Lock is the acknowledgement at work.
	if !exists(t, replica, lockKey) {
		t.Fatal("Lock returned before the replica had the lock")
	}
	stats, err := master.CommandStats(ctx)
	if err != nil || stats["wait"] < 1 {
		t.Fatalf("WAIT calls = %d, %v; want at least 1", stats["wait"], err)
	}
	if _, err := c1.Mutex(name).Lock(lockCtx); err != nil { // re-entry
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c2.Mutex(name).Lock(ctx)
		if err == nil {
			if !exists(t, replica, lockKey) {
				err = errors.New("a handed-over lock was not on the replica when Lock returned")
			}
			err = errors.Join(err, c2.Mutex(name).Unlock(l))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the second Client never queued", func() bool {
		n, _ := master.Subscribers(ctx, lockKey+":to:*")
		return n >= 1
	})
	for range 2 {
		if err := c1.Mutex(name).Unlock(lockCtx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func newAckClient(t *testing.T, s *redistest.Server, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	c, err := rlock.New(redistest.Client(t, s), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReplicaAckNotReplicated: with the replica frozen, Lock and TryLock fail
// with ErrNotReplicated after the timeout and leave no hold in Redis; with
// WithReplicaAckRetry a Lock waits and succeeds once the replica is back.
func TestReplicaAckNotReplicated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	master, replica := g.Servers[0], g.Servers[1]
	c := newAckClient(t, master, rlock.WithReplicaAck(1, 100*time.Millisecond))
	retrying := newAckClient(t, master, rlock.WithReplicaAck(1, 100*time.Millisecond), rlock.WithReplicaAckRetry())
	const name = "ack-fail"
	lockKey := "rlock:{" + name + "}"

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = replica.Resume()
		}
	}()
	start := time.Now()
	_, err := c.Mutex(name).Lock(ctx)
	if !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("Lock = %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("Lock failed after %v, before the ack timeout", d)
	}
	t.Log(err)
	if exists(t, master, lockKey) {
		t.Fatal("a Lock that failed with ErrNotReplicated left the lock held")
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("TryLock = %v, want ErrNotReplicated", err)
	}
	if exists(t, master, lockKey) {
		t.Fatal("a TryLock that failed with ErrNotReplicated left the lock held")
	}

	// The retry policy: waits while the replica is away.
	before, err := master.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := retrying.Mutex(name).Lock(ctx)
		if err == nil {
			err = retrying.Mutex(name).Unlock(l)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the retrying Lock never tried twice", func() bool {
		now, err := master.CommandStats(ctx)
		return err == nil && now["wait"] >= before["wait"]+2
	})
	select {
	case err := <-got:
		t.Fatalf("the retrying Lock returned while the replica was away: %v", err)
	default:
	}
	resumed = true
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the retrying Lock did not succeed within 5s of the replica's return")
	}

	// A bounded wait ends with the cause.
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed = false
	_, err = retrying.Mutex(name).Lock(ctx, rlock.WithWaitTimeout(300*time.Millisecond))
	if !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("Lock with a wait timeout and no replica = %v, want ErrNotReplicated", err)
	}
	// An attempt the wait timeout cut off mid-call (its WAIT still blocked)
	// is given back in the background: soon, not necessarily by the return.
	eventually(t, 2*time.Second, "the retrying Lock left the lock held", func() bool {
		return !exists(t, master, lockKey)
	})
}

// TestReplicaAckKeepsLockThroughFailover: a lock taken with WithReplicaAck is
// on the replica, so a failover keeps it: its holder keeps it, and another
// Client cannot take it on the new master.
func TestReplicaAckKeepsLockThroughFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	opts := []rlock.Option{rlock.WithWatchdogTimeout(4 * time.Second), rlock.WithReplicaAck(1, 2*time.Second)}
	holder, other := sentinelClient(t, g, opts...), sentinelClient(t, g, opts...)
	const name = "ack-failover"

	lockCtx, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := g.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(t, promoted, "rlock:{"+name+"}") {
		t.Fatal("an acknowledged lock was lost in the failover")
	}
	// Ask through the Sentinel client until it talks to the new master.
	eventually(t, 8*time.Second, "the other Client never reached the new master", func() bool {
		_, err := other.Mutex(name).TryLock(ctx)
		if err == nil {
			t.Fatal("another Client took an acknowledged lock after the failover")
		}
		return errors.Is(err, rlock.ErrLocked)
	})
	// The holder's watchdog renews it there (the lease goes back up).
	eventually(t, 8*time.Second, "the holder's watchdog never renewed on the new master", func() bool {
		msg, err := promoted.Do(ctx, "PTTL", "rlock:{"+name+"}")
		if err != nil {
			return false
		}
		ms, _ := msg.AsInt64()
		return ms > 3500
	})
	if err := context.Cause(lockCtx); err != nil {
		t.Fatalf("the holder lost its acknowledged lock: %v", err)
	}
	if err := holder.Mutex(name).Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if exists(t, promoted, "rlock:{"+name+"}") {
		t.Fatal("Unlock did not free the lock on the new master")
	}
}

// TestReplicaAckOptions: WithReplicaAck's arguments are checked by New.
func TestReplicaAckOptions(t *testing.T) {
	t.Parallel()
	rc := redistest.Client(t, redistest.New(t))
	for _, tc := range []struct {
		opts []rlock.Option
		want error
	}{
		{[]rlock.Option{rlock.WithReplicaAck(0, time.Second)}, rlock.ErrInvalidOption},
		{[]rlock.Option{rlock.WithReplicaAck(-1, time.Second)}, rlock.ErrInvalidOption},
		{[]rlock.Option{rlock.WithReplicaAck(1, 0)}, rlock.ErrInvalidLease},
		{[]rlock.Option{rlock.WithReplicaAck(1, time.Microsecond)}, rlock.ErrInvalidLease},
		{[]rlock.Option{rlock.WithReplicaAck(1, time.Hour)}, rlock.ErrInvalidLease},
		{[]rlock.Option{rlock.WithReplicaAckRetry()}, rlock.ErrInvalidOption},
	} {
		c, err := rlock.New(rc, tc.opts...)
		if !errors.Is(err, tc.want) {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("New = %v, want %v", err, tc.want)
		}
	}
	c, err := rlock.New(rc, rlock.WithReplicaAck(1, time.Second), rlock.WithReplicaAckRetry())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// TestReplicaAckCluster: through a rueidis cluster client, WAIT goes on the
// connection of the script (rueidis's Dedicated pins the lock's slot): on a
// one-node cluster without replicas Lock fails with ErrNotReplicated and
// leaves nothing held; with WithReplicaAck off it succeeds.
func TestReplicaAckCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv := singleNodeCluster(t, ctx)
	rc := redistest.Client(t, srv, func(o *rueidis.ClientOption) { o.ForceSingleClient = false })
	if rc.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", rc.Mode())
	}
	acked, err := rlock.New(rc, rlock.WithReplicaAck(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer acked.Close()
	const name = "ack-cluster"
	if _, err := acked.Mutex(name).Lock(ctx); !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("Lock without replicas = %v, want ErrNotReplicated", err)
	}
	if exists(t, srv, "rlock:{"+name+"}") {
		t.Fatal("a Lock that failed with ErrNotReplicated left the lock held")
	}
	plain, err := rlock.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	lockCtx, err := plain.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Mutex(name).Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
}

// waitReplicated writes a marker on master and waits until a replica has
// acknowledged it: a write acknowledged by it covers everything before it
// (the locks and queue places taken so far).
func waitReplicated(t *testing.T, ctx context.Context, master *redistest.Server) {
	t.Helper()
	err := redistest.Client(t, master).Dedicated(func(dc rueidis.DedicatedClient) error {
		if err := dc.Do(ctx, dc.B().Set().Key("marker").Value("1").Build()).Error(); err != nil {
			return err
		}
		n, err := dc.Do(ctx, dc.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
		if err == nil && n < 1 {
			err = errors.New("the replica did not acknowledge")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
