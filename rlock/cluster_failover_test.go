package rlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
	"github.com/relockio/relock/rlock"
)

// Failovers of a Redis Cluster shard (redistest.NewCluster with one replica
// per master) while its locks are held and waited for: what carries on, and
// what asynchronous replication loses without WithReplicaAck.

const (
	// foLease is the lease of the holders and waiters below: a waiter that
	// missed its wake-up would wait for a re-check (4/5 of it) or for the
	// holder's lease to run out, far beyond foWaitBound.
	foLease = 20 * time.Second
	// foWaitBound bounds every wait that follows a failover: the waiter
	// must hear of the release (or of the topology change) and re-check,
	// not sit out a lease.
	foWaitBound = 5 * time.Second
)

// namesOn returns n lock names starting with tag whose slots owner serves.
func namesOn(ctx context.Context, t *testing.T, c *redistest.Cluster, owner *redistest.Server, tag string, n int) []string {
	t.Helper()
	owners := map[uint16]*redistest.Server{}
	var names []string
	for i := 0; len(names) < n && i < 1000; i++ {
		name := tag + strconv.Itoa(i)
		s := slot.Of("{" + name + "}")
		o, ok := owners[s]
		if !ok {
			var err error
			if o, err = c.Owner(ctx, int64(s)); err != nil {
				t.Fatal(err)
			}
			owners[s] = o
		}
		if o == owner {
			names = append(names, name)
		}
	}
	if len(names) < n {
		t.Fatalf("found %d names served by %s, want %d", len(names), owner, n)
	}
	return names
}

// churn is goroutines of several Clients locking one Mutex in a loop, each
// hold a moment long, through whatever happens to its shard meanwhile. It
// records every acquisition's wait, and every entry that found another
// holder inside with the holds inside (an overlap).
type churn struct {
	mu       sync.Mutex
	inside   map[*churnHold]bool
	overlaps []churnOverlap
	waits    []churnWait
	holds    []*churnHold
	errs     []error
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

type churnHold struct {
	who  string
	lost bool // its Unlock (or lock context) said the lease was lost
}

type churnOverlap struct {
	at    time.Time
	holds []*churnHold
}

type churnWait struct{ start, end time.Time }

func startChurn(ctx context.Context, clients []*rlock.Client, name string, perClient int) *churn {
	ctx, cancel := context.WithCancel(ctx)
	ch := &churn{inside: map[*churnHold]bool{}, cancel: cancel}
	for i, cl := range clients {
		for g := range perClient {
			who := "c" + strconv.Itoa(i) + "g" + strconv.Itoa(g)
			ch.wg.Go(func() { ch.loop(ctx, cl.Mutex(name), who) })
		}
	}
	return ch
}

// halt stops the churn's goroutines (a Lock still waiting is cut short) and
// waits for them.
func (ch *churn) halt() {
	ch.cancel()
	ch.wg.Wait()
}

// progressSince reports whether an acquisition ended after t.
func (ch *churn) progressSince(t time.Time) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.waits) > 0 && ch.waits[len(ch.waits)-1].end.After(t)
}

// firstEndAfter returns when the first acquisition that ended after t ended.
func (ch *churn) firstEndAfter(t time.Time) time.Time {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, w := range ch.waits {
		if w.end.After(t) {
			return w.end
		}
	}
	return time.Time{}
}

func (ch *churn) loop(ctx context.Context, m *rlock.Mutex, who string) {
	for ctx.Err() == nil {
		start := time.Now()
		lockCtx, err := m.Lock(ctx, rlock.WithWaitTimeout(foLease+foWaitBound))
		end := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				ch.mu.Lock()
				ch.errs = append(ch.errs, err)
				ch.mu.Unlock()
			}
			return
		}
		h := &churnHold{who: who}
		ch.mu.Lock()
		ch.waits = append(ch.waits, churnWait{start, end})
		if len(ch.inside) > 0 {
			o := churnOverlap{at: end, holds: []*churnHold{h}}
			for x := range ch.inside {
				o.holds = append(o.holds, x)
			}
			ch.overlaps = append(ch.overlaps, o)
		}
		ch.inside[h] = true
		ch.holds = append(ch.holds, h)
		ch.mu.Unlock()
		time.Sleep(200 * time.Microsecond) // the critical section's work
		ch.mu.Lock()
		delete(ch.inside, h)
		ch.mu.Unlock()
		err = m.Unlock(lockCtx)
		lost := errors.Is(err, rlock.ErrLeaseLost) || errors.Is(err, rlock.ErrNotHeld) ||
			errors.Is(context.Cause(lockCtx), rlock.ErrLeaseLost)
		ch.mu.Lock()
		h.lost = lost
		if err != nil && !lost {
			ch.errs = append(ch.errs, err)
		}
		ch.mu.Unlock()
		if err != nil && !lost {
			return
		}
	}
}

// churnStats are a churn's figures, for the log.
type churnStats struct {
	holds, lost, overlaps int
	longest               time.Duration // the longest wait counted from settled
}

// finish halts the churn and checks it against what the failover allows.
// settled is when the cluster agreed on the new topology. Every call must
// have succeeded, and every overlap must have begun before settled (while a
// master that had not yet learned of its replacement still took writes) or
// be beside a hold whose lease was lost (its acquisition never reached the
// new master). strict (a coordinated failover, which loses nothing) asks
// more: no overlap, no lost lease, and no acquisition that took longer than
// foWaitBound counted from the later of its start and settled.
func (ch *churn) finish(t *testing.T, settled time.Time, strict bool) churnStats {
	t.Helper()
	ch.halt()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var st churnStats
	for _, err := range ch.errs {
		t.Errorf("churn: %v", err)
	}
	for _, h := range ch.holds {
		if h.lost {
			st.lost++
		}
	}
	st.holds, st.overlaps = len(ch.holds), len(ch.overlaps)
	for _, w := range ch.waits {
		from := w.start
		if settled.After(from) {
			from = settled
		}
		st.longest = max(st.longest, w.end.Sub(from))
	}
	if strict {
		if st.lost > 0 || st.overlaps > 0 {
			t.Errorf("a coordinated failover cost %d leases and let %d overlaps through", st.lost, st.overlaps)
		}
		if st.longest > foWaitBound {
			t.Errorf("a churning Lock took %v after the cluster settled, bound %v (lease %v)", st.longest.Round(time.Millisecond), foWaitBound, foLease)
		}
		return st
	}
	for _, o := range ch.overlaps {
		excused := o.at.Before(settled)
		var who []string
		for _, h := range o.holds {
			excused = excused || h.lost
			who = append(who, h.who)
		}
		if !excused {
			t.Errorf("holds of %v overlapped %v after the cluster settled, none with a lost lease", who, o.at.Sub(settled).Round(time.Millisecond))
		}
	}
	return st
}

// TestClusterFailoverHoldersAndWaiters fails a shard over four ways while
// one Client holds two of its locks and another waits for them: CLUSTER
// FAILOVER (coordinated: the master stops writes until its replica caught
// up, nothing is lost), FORCE and TAKEOVER (no handshake: the master takes
// writes until it learns of its replacement, and those are lost), and the
// master killed (its replica is elected; what it had not received is lost).
// The holds and the waiters' places were replicated before (WaitSynced), so
// the new master has them whatever the mode: the holder keeps its locks (its
// lock contexts stay live, its Unlock succeeds on the new master, and after
// the kill its watchdog is seen renewing there) and each waiter gets its lock
// within foWaitBound of the Unlock, not after a lease (20s).
//
// Meanwhile goroutines of two more Clients lock a third Mutex of the shard in
// a loop (see churn.finish): through the coordinated failover nothing is lost
// and no wait exceeds foWaitBound; through the others, two of them are inside
// at once only while the old master still takes writes or beside a hold
// whose lease was lost; and they get the lock again within a lease of the
// failover (a write the new master never received, a release or a waiter
// leaving the queue, leaves the lock held there until its lease ends, or
// handed to a waiter that is gone until its claim window ends).
func TestClusterFailoverHoldersAndWaiters(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	opts := []rlock.Option{rlock.WithWatchdogTimeout(foLease), rlock.WithUnlockTimeout(3 * foWaitBound)}
	holder := clusterClient(t, c, prefix, opts...)
	waiter := clusterClient(t, c, prefix, opts...)
	churners := []*rlock.Client{clusterClient(t, c, prefix, opts...), clusterClient(t, c, prefix, opts...)}
	for i, mode := range []string{"coordinated", "force", "takeover", "kill"} {
		// A slot of each shard in turn (the kill takes the first again).
		s := int64(i%len(c.Masters)) * slot.Count / int64(len(c.Masters))
		t.Run(mode, func(t *testing.T) {
			failoverRound(ctx, t, c, s, mode, holder, waiter, churners, prefix)
		})
		if t.Failed() {
			return
		}
	}
}

func failoverRound(ctx context.Context, t *testing.T, c *redistest.Cluster, s int64, mode string,
	holder, waiter *rlock.Client, churners []*rlock.Client, prefix string) {
	owner, err := c.Owner(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	held := namesOn(ctx, t, c, owner, mode+"-held", 2)
	hot := namesOn(ctx, t, c, owner, mode+"-hot", 1)[0]
	key := func(name string) string { return prefix + ":{" + name + "}" }

	lockCtxs := make([]context.Context, len(held))
	waits := make([]<-chan lockResult, len(held))
	for i, n := range held {
		if lockCtxs[i], err = holder.Mutex(n).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waits[i] = lockAsync(ctx, waiter.Mutex(n))
	}
	ch := startChurn(ctx, churners, hot, 2)
	defer ch.halt() // when the round fails before finish
	eventually(t, foWaitBound, "the waiters never queued", func() bool {
		for _, n := range held {
			if keys, _ := owner.Keys(ctx, key(n)+":queue"); len(keys) == 0 {
				return false
			}
		}
		return true
	})
	if err := c.WaitSynced(ctx, owner); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	var promoted *redistest.Server
	switch mode {
	case "coordinated":
		_, promoted, err = c.Failover(ctx, s, "")
	case "force":
		_, promoted, err = c.Failover(ctx, s, "FORCE")
	case "takeover":
		_, promoted, err = c.Failover(ctx, s, "TAKEOVER")
	case "kill":
		_, promoted, err = c.KillPrimary(ctx, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	settled := time.Now()
	t.Logf("%s: %s took the shard over in %v", mode, promoted, settled.Sub(start).Round(time.Millisecond))
	for _, n := range held {
		if !exists(t, promoted, key(n)) {
			t.Fatalf("the new master lacks the replicated lock %s", n)
		}
	}
	if mode == "kill" {
		// The watchdog renews on the new master: the lease there goes back
		// up (it only falls while no renewal arrives).
		eventually(t, foLease/3+foWaitBound, "the holder's watchdog never renewed on the new master", func() bool {
			msg, err := promoted.Do(ctx, "PTTL", key(held[0]))
			ms, _ := msg.AsInt64()
			return err == nil && ms > (foLease-time.Second).Milliseconds()
		})
	}
	for i, n := range held {
		select {
		case r := <-waits[i]:
			t.Fatalf("the waiter got %s while it was held (err %v)", n, r.err)
		default:
		}
		if err := context.Cause(lockCtxs[i]); err != nil {
			t.Fatalf("the holder lost %s, which the new master has: %v", n, err)
		}
		if err := holder.Mutex(n).Unlock(lockCtxs[i]); err != nil {
			t.Fatalf("Unlock of %s on the new master: %v", n, err)
		}
		unlocked := time.Now()
		r := receiveLock(t, waits[i], foWaitBound, "the waiter for "+n)
		t.Logf("%s: the waiter got %s %v after Unlock", mode, n, r.at.Sub(unlocked).Round(time.Millisecond))
		if err := waiter.Mutex(n).Unlock(r.lc); err != nil {
			t.Fatal(err)
		}
	}
	// Let the churn go on on the new master. After a coordinated failover
	// it must within foWaitBound. After the others a write the new master
	// never received may stall it: a waiter's queue entry that is gone (the
	// lock is handed to it for a claim window, 3s), or a release (the lock
	// stays until its lease ends); nothing may hold it longer than a lease.
	strict := mode == "coordinated"
	bound := foWaitBound
	if !strict {
		bound = foLease + foWaitBound
	}
	after := settled.Add(300 * time.Millisecond)
	eventually(t, bound, "the churn made no progress on the new master", func() bool { return ch.progressSince(after) })
	t.Logf("%s: the churn's first acquisition after the cluster settled came %v after it", mode, ch.firstEndAfter(settled).Sub(settled).Round(time.Millisecond))
	st := ch.finish(t, settled, strict)
	t.Logf("%s: churn: %d holds, %d leases lost, %d overlaps, longest wait counted from the settled cluster %v",
		mode, st.holds, st.lost, st.overlaps, st.longest.Round(time.Millisecond))
}

// TestClusterUnacknowledgedLockLost shows, deterministically, what
// asynchronous replication costs a lock on a cluster without WithReplicaAck
// (as TestSentinelUnacknowledgedLockLost does through Sentinel): with the
// shard's replica cut off (BlockReplication), a lock is granted by the
// master only; the master is killed and the replica takes over without it,
// so another Client takes the lock at once, while the first still believes
// it holds it. The first learns of it at its next renewal: ErrLeaseLost.
func TestClusterUnacknowledgedLockLost(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	const lease = 10 * time.Second
	first := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(lease))
	second := clusterClient(t, c, prefix, rlock.WithWatchdogTimeout(lease))
	const name = "cluster-lost"
	key := prefix + ":{" + name + "}"
	s := int64(slot.Of(key))
	owner, err := c.Owner(ctx, s)
	if err != nil {
		t.Fatal(err)
	}

	if err := c.BlockReplication(ctx, owner); err != nil {
		t.Fatal(err)
	}
	lockCtx, err := first.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	_, promoted, err := c.KillPrimary(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the replica took over %v after the acquisition", time.Since(acquired).Round(time.Millisecond))
	if exists(t, promoted, key) {
		t.Fatal("the lock reached the replica although replication was blocked")
	}
	var secondCtx context.Context
	eventually(t, foWaitBound, "the second Client never got the lock lost in the failover", func() bool {
		secondCtx, err = second.Mutex(name).TryLock(ctx)
		return err == nil
	})
	if d := time.Since(acquired); d >= lease {
		t.Fatalf("the second Client got the lock %v after the first, not before the first's lease (%v) could end", d, lease)
	}
	// The first Client's watchdog started with this hold, so its first
	// renewal comes a third of the lease after the acquisition. Before that
	// it cannot know; after it (a slow failover on a loaded machine) the
	// renewal may have told it, with ErrLeaseLost.
	sinceAcquired := time.Since(acquired)
	switch err := context.Cause(lockCtx); {
	case err != nil && sinceAcquired < lease/3:
		t.Fatalf("the first holder knew of its loss before its next renewal: %v", err)
	case err != nil && !errors.Is(err, rlock.ErrLeaseLost):
		t.Fatalf("the first holder's cause = %v, want ErrLeaseLost", err)
	case err != nil:
		t.Logf("the failover and the second Client's TryLock took %v, past the first renewal, which told the first holder: %v",
			sinceAcquired.Round(time.Millisecond), err)
	default:
		t.Log("two Clients believe they hold the lock; only fencing tokens tell them apart")
	}
	select {
	case <-lockCtx.Done():
		if !errors.Is(context.Cause(lockCtx), rlock.ErrLeaseLost) {
			t.Fatalf("the first holder's cause = %v, want ErrLeaseLost", context.Cause(lockCtx))
		}
		t.Logf("the first holder learned of its loss %v after the acquisition", time.Since(acquired).Round(time.Millisecond))
	case <-time.After(lease/3 + foWaitBound):
		t.Fatal("the first holder never learned of its loss")
	}
	if err := second.Mutex(name).Unlock(secondCtx); err != nil {
		t.Fatal(err)
	}
}

// TestClusterReplicaAckKeepsLockThroughFailover: with WithReplicaAck on a
// cluster, an acquisition the shard's replica cannot acknowledge fails with
// ErrNotReplicated and leaves nothing held; once it can, Lock returns only
// after the replica has the lock, so when the master is then killed the
// promoted replica has it: another Client cannot take it, and the holder's
// watchdog renews it there until its Unlock frees it. A Client that learned
// the topology before the promotion and says nothing until the killed master
// is back as a replica meets MOVED on the connection WithReplicaAck pins
// (rueidis follows redirects elsewhere): its Lock retries, and succeeds.
func TestClusterReplicaAckKeepsLockThroughFailover(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	const lease = 10 * time.Second
	opts := []rlock.Option{rlock.WithWatchdogTimeout(lease), rlock.WithReplicaAck(1, time.Second)}
	holder := clusterClient(t, c, prefix, opts...)
	other := clusterClient(t, c, prefix, opts...)
	const name = "cluster-acked"
	key := prefix + ":{" + name + "}"
	s := int64(slot.Of(key))
	owner, err := c.Owner(ctx, s)
	if err != nil {
		t.Fatal(err)
	}

	// The replica cut off: no acknowledgement, no lock left behind.
	if err := c.BlockReplication(ctx, owner); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = holder.Mutex(name).Lock(ctx)
	if !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("Lock with the replica cut off = %v, want ErrNotReplicated", err)
	}
	t.Logf("Lock failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if exists(t, owner, key) {
		t.Fatal("a Lock that failed with ErrNotReplicated left the lock held")
	}
	if err := c.AllowReplication(ctx, owner, 1); err != nil {
		t.Fatal(err)
	}

	lockCtx, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// No WaitSynced here: Lock's own acknowledgement is what is tested.
	start = time.Now()
	old := owner
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	// A Client that starts now learns a topology in which the killed master
	// still owns the slot, and says nothing until after the failover.
	late := clusterClient(t, c, prefix, opts...)
	promoted, err := c.WaitNewOwner(ctx, s, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the replica took over in %v", time.Since(start).Round(time.Millisecond))
	if !exists(t, promoted, key) {
		t.Fatal("an acknowledged lock was lost in the failover")
	}
	// Ask until the other Client talks to the new master.
	eventually(t, foWaitBound, "the other Client never reached the new master", func() bool {
		_, err := other.Mutex(name).TryLock(ctx)
		if err == nil {
			t.Fatal("another Client took an acknowledged lock after the failover")
		}
		return errors.Is(err, rlock.ErrLocked)
	})
	eventually(t, lease/3+foWaitBound, "the holder's watchdog never renewed on the new master", func() bool {
		msg, err := promoted.Do(ctx, "PTTL", key)
		ms, _ := msg.AsInt64()
		return err == nil && ms > (lease-time.Second).Milliseconds()
	})
	if err := context.Cause(lockCtx); err != nil {
		t.Fatalf("the holder lost its acknowledged lock: %v", err)
	}
	if err := holder.Mutex(name).Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if exists(t, promoted, key) {
		t.Fatal("Unlock did not free the lock on the new master")
	}

	// With the killed master back as the new one's replica, the first
	// acknowledged acquisition of a Client silent since before the failover
	// meets MOVED on its pinned connection (rueidis's slot map is stale):
	// retried, not returned.
	if _, err := c.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	lateCtx, err := late.Mutex(name+"-late").Lock(ctx, rlock.WithWaitTimeout(foWaitBound))
	if err != nil {
		t.Fatalf("the first acknowledged Lock after the failover: %v", err)
	}
	t.Logf("the first acknowledged Lock after the failover took %v", time.Since(start).Round(time.Millisecond))
	if err := late.Mutex(name + "-late").Unlock(lateCtx); err != nil {
		t.Fatal(err)
	}
}
