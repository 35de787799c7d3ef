//go:build linux

package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
)

// The "cluster" scenarios run the workload on a Redis Cluster of 3 masters
// with one replica each (redistest.NewCluster): the workers reach it through
// rueidis cluster clients (no fault proxy), the lock lives in the slot of its
// hash tag {res}, and the fault kills that slot's master.

// noAck runs the cluster scenarios without replica acknowledgement, to see
// what it saves (see clusterAck).
var noAck = flag.Bool("chaos.noack", false, "cluster scenarios: workers without rlock.WithReplicaAck (an experiment: see what acknowledgement saves)")

// clusterAck is the replica acknowledgement the workers of a cluster scenario
// ask for (rlock.WithReplicaAck(1, clusterAck), with WithReplicaAckRetry): a
// lock Lock returned is on the replica, so the failover that promotes it keeps
// the lock. (Renewals are not acknowledged: a failover that outlasts what is
// left of a hold's lease on the replica can still end the hold, which its
// holder learns as ErrLeaseLost.)
//
// Without it (-chaos.noack), an acquisition the killed master had not passed
// on is missing on the new master, which grants the lock again while its
// first holder works on under it (a long hold spans the failover). The checker
// counts those overlaps as excused, not as violations: the first holder
// learns of the loss (ErrLeaseLost, at its next renewal) and the fence
// rejects its stale write, the accounting it applies to every lost lease. So
// the scenario runs with acknowledgement, which must keep such overlaps from
// happening at all; rlock/cluster_failover_test.go shows the loss itself,
// deterministically.
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
	if !*noAck {
		r.cfg.AckReplicas, r.cfg.AckTimeout = 1, clusterAck
	}
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

// clusterCutWait bounds how long a kill waits, with replication cut off,
// for a long critical section to begin: without WithReplicaAck it begins at
// once (its acquisition is lost with the master); with it, it cannot.
const clusterCutWait = 2 * time.Second

// injectPrimaryKill kills the master of the lock's slot (SIGKILL) once in the
// short run and three times in the full one, spread over the run.
//
// The first and the third kill come after the master's replication was cut
// off (redistest BlockReplication, as a replica lagging behind) just before
// a long critical section's turn, as soon as that section begins or after
// clusterCutWait: what the master accepts meanwhile is lost with it.
// Acknowledged acquisitions cannot be made then (they wait,
// WithReplicaAckRetry), but releases, renewals and queue changes are lost.
// The second comes as a long critical section begins, acquired before.
//
// The replica is elected in the master's place; the killed node is then
// restarted (empty) and rejoins as the new master's replica, so that
// acquisitions can be acknowledged again. The fault lasts from the cut (or
// the kill) to the promotion; the rejoin comes after (longest recovery
// includes it: no acquisition is acknowledged without a replica).
func injectPrimaryKill(r *run, full bool) {
	n := int64(1)
	if full {
		n = 3
	}
	for i := int64(1); i <= n; i++ {
		cut := i%2 == 1
		at := r.cfg.Total * i / (n + 1)
		if cut {
			// The operation before the next long one.
			at = (at/r.cfg.LongEvery+1)*r.cfg.LongEvery - 1
		}
		if !r.waitProgress(at) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := mono()
		what := "kill master"
		if cut {
			what = "cut replication, kill master"
			master, err := r.cluster.Owner(ctx, r.lockSlot())
			if err == nil {
				r.drainEntries()
				err = r.cluster.BlockReplication(ctx, master)
			}
			if err != nil {
				cancel()
				r.t.Errorf("cut the replication of slot %d: %v", r.lockSlot(), err)
				return
			}
			if began := r.awaitLongEntry(clusterCutWait); began {
				what += ", a long hold began meanwhile"
			}
		} else {
			r.drainEntries()
			if !r.awaitLongEntry(0) {
				cancel()
				return
			}
		}
		killed := mono()
		old, _, err := r.cluster.KillPrimary(ctx, r.lockSlot())
		if err != nil {
			cancel()
			r.t.Errorf("kill the master of slot %d: %v", r.lockSlot(), err)
			return
		}
		r.fault(what, start)
		took := time.Duration(mono() - killed)
		_, err = r.cluster.Rejoin(ctx, old)
		cancel()
		if err != nil {
			r.t.Errorf("rejoin %s: %v", old, err)
			return
		}
		r.note(fmt.Sprintf("kill %d (%s): the replica took over %v after the kill, the killed master was back as its replica (in sync) %v after the kill",
			i, what, took.Round(time.Millisecond), time.Duration(mono()-killed).Round(time.Millisecond)))
	}
}

// drainEntries forgets the critical sections entered so far.
func (r *run) drainEntries() {
	for {
		select {
		case <-r.entered:
		default:
			return
		}
	}
}

// awaitLongEntry waits until a worker enters a long critical section (one
// entered before the last drainEntries may count too), for up to within (0:
// until the run ends); it reports whether one did.
func (r *run) awaitLongEntry(within time.Duration) bool {
	var timeout <-chan time.Time
	if within > 0 {
		timeout = time.After(within)
	}
	for {
		select {
		case <-r.ctx.Done():
			return false
		case <-timeout:
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
// the lock server (sharded ones on a cluster's master), with their counts;
// on a cluster or a Sentinel group, the other data servers' too (a replica,
// or a master demoted by a failover, must keep none), named "channel on
// addr".
func (r *run) subscribedChannels(ctx context.Context) (map[string]int64, error) {
	counts, err := r.subscribedOn(ctx, r.lock)
	if err != nil {
		return nil, err
	}
	var others []*redistest.Server
	switch {
	case r.cluster != nil:
		others = r.cluster.Nodes()
	case r.sentinel != nil:
		others = r.sentinel.Servers
	}
	for _, s := range others {
		if s == r.lock {
			continue
		}
		n, err := r.subscribedOn(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		for ch, k := range n {
			if counts == nil {
				counts = map[string]int64{}
			}
			counts[ch+" on "+s.Addr()] = k
		}
	}
	return counts, nil
}

// subscribedOn returns the workload's channels that have subscribers on s
// (sharded ones on a cluster), with their counts.
func (r *run) subscribedOn(ctx context.Context, s *redistest.Server) (map[string]int64, error) {
	kind, numsub := "CHANNELS", "NUMSUB"
	if r.cluster != nil {
		kind, numsub = "SHARDCHANNELS", "SHARDNUMSUB"
	}
	msg, err := s.Do(ctx, "PUBSUB", kind, "chaos*")
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", kind, err)
	}
	chans, _ := msg.AsStrSlice()
	if len(chans) == 0 {
		return nil, nil
	}
	msg, err = s.Do(ctx, append([]string{"PUBSUB", numsub}, chans...)...)
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", numsub, err)
	}
	counts, err := msg.AsIntMap()
	if err != nil {
		return nil, fmt.Errorf("PUBSUB %s: %w", numsub, err)
	}
	return counts, nil
}
