//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
)

// The "cluster" scenarios run the workload on a Redis Cluster of 3 masters
// with one replica each (redistest.NewCluster): the workers reach it through
// rueidis cluster clients (no fault proxy), the lock lives in the slot of its
// hash tag {res}, and the fault kills that slot's master.

// clusterAck is the replica acknowledgement the workers of a cluster scenario
// ask for (rlock.WithReplicaAck(1, clusterAck), with WithReplicaAckRetry): a
// lock Lock returned is on the replica, so the failover that promotes it keeps
// the lock. Without it, a lock granted just before the kill can be missing on
// the new master, which grants it again while its first holder still works
// under it: the overlap would be excused only because the kill outlasts the 1s
// lease (the first holder's lease is lost too), which says nothing about a
// longer lease; rlock/cluster_failover_test.go shows that loss directly.
const clusterAck = time.Second

// clusterLease is the lease of a cluster scenario's holds: longer than a
// failover (2-4s here), so that a hold the new master has survives it, and a
// hold it lacks is still believed held when another is granted the lock.
const clusterLease = 5 * time.Second

// startCluster starts the cluster of a cluster scenario and points r.lock at
// the master of the lock's slot.
func (r *run) startCluster() {
	r.cluster = redistest.NewCluster(r.t, 3, 1)
	r.cfg.Cluster = nil
	for _, m := range r.cluster.Masters {
		r.cfg.Cluster = append(r.cfg.Cluster, m.Addr())
	}
	r.cfg.AckReplicas, r.cfg.AckTimeout = 1, clusterAck
	if err := r.findLockMaster(); err != nil {
		r.t.Fatal(err)
	}
}

// lockSlot is the cluster slot of every key and channel of the workload's lock.
func (r *run) lockSlot() int64 { return int64(slot.Of("{" + r.cfg.Name + "}")) }

// findLockMaster points r.lock at the current master of the lock's slot, which
// the leftover checks read.
func (r *run) findLockMaster() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.cluster.WaitOK(ctx); err != nil {
		return err
	}
	m, err := r.cluster.Owner(ctx, r.lockSlot())
	if err != nil {
		return err
	}
	r.lock = m
	return nil
}

// injectPrimaryKill kills the master of the lock's slot (SIGKILL: what it had
// not sent its replica is lost) once in the short run and three times in the
// full one, spread over the run, each time as a worker enters a long
// critical section (its acquisition just done). Its replica is elected in its place; the
// killed node is then restarted (empty) and rejoins as the new master's
// replica, so that acquisitions can be acknowledged again. The fault lasts
// from the kill to the promotion; the rejoin comes after (longest recovery
// includes it: no acquisition is acknowledged without a replica).
func injectPrimaryKill(r *run, full bool) {
	n := int64(1)
	if full {
		n = 3
	}
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total*i/(n+1)) || !r.awaitLongEntry() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := mono()
		old, _, err := r.cluster.KillPrimary(ctx, r.lockSlot())
		if err != nil {
			cancel()
			r.t.Errorf("kill the master of slot %d: %v", r.lockSlot(), err)
			return
		}
		r.fault("kill master", start)
		took := time.Duration(mono() - start)
		_, err = r.cluster.Rejoin(ctx, old)
		cancel()
		if err != nil {
			r.t.Errorf("rejoin %s: %v", old, err)
			return
		}
		r.note(fmt.Sprintf("kill %d: the replica took over %v after the kill, the killed master was back as its replica (in sync) %v after the kill",
			i, took.Round(time.Millisecond), time.Duration(mono()-start).Round(time.Millisecond)))
	}
}

// awaitLongEntry waits until a worker enters a long critical section (one
// that entered before the call does not count); it reports whether the run
// goes on.
func (r *run) awaitLongEntry() bool {
	for drained := false; !drained; {
		select {
		case <-r.entered:
		default:
			drained = true
		}
	}
	for {
		select {
		case <-r.ctx.Done():
			return false
		case ev := <-r.entered:
			if ev.Long {
				return true
			}
		}
	}
}

// note records a line for the scenario's notes.
func (r *run) note(s string) {
	r.mu.Lock()
	r.notes = append(r.notes, s)
	r.mu.Unlock()
}

// undoClusterFaults brings every killed node of the cluster back (as a
// replica) and points r.lock at the lock's master.
func (r *run) undoClusterFaults() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range r.cluster.Nodes() {
		if s.Ping(ctx) != nil {
			if _, err := r.cluster.Rejoin(ctx, s); err != nil {
				r.t.Errorf("rejoin %s: %v", s, err)
			}
		}
	}
	if err := r.findLockMaster(); err != nil {
		r.t.Error(err)
	}
}

// subscribedChannels returns the workload's channels that have subscribers on
// the lock server (sharded ones on a cluster's master), with their counts.
func (r *run) subscribedChannels(ctx context.Context) (map[string]int64, error) {
	kind, numsub := "CHANNELS", "NUMSUB"
	if r.cluster != nil {
		kind, numsub = "SHARDCHANNELS", "SHARDNUMSUB"
	}
	msg, err := r.lock.Do(ctx, "PUBSUB", kind, "chaos*")
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", kind, err)
	}
	chans, _ := msg.AsStrSlice()
	if len(chans) == 0 {
		return nil, nil
	}
	msg, err = r.lock.Do(ctx, append([]string{"PUBSUB", numsub}, chans...)...)
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", numsub, err)
	}
	counts, err := msg.AsIntMap()
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", numsub, err)
	}
	return counts, nil
}
