//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// The "sentinel" scenarios run the workload on a master with one replica
// watched by three Sentinels (redistest.NewSentinelGroup): the workers reach
// it through rueidis Sentinel clients (no fault proxy), which follow the
// master the Sentinels name, and ask for replica acknowledgement as on a
// cluster (see clusterAck). The faults are failovers.

// startSentinel starts the Sentinel group of a sentinel scenario and points
// r.lock at its master.
func (r *run) startSentinel() {
	r.sentinel = redistest.NewSentinelGroup(r.t)
	r.cfg.Sentinel, r.cfg.MasterSet = r.sentinel.SentinelAddrs(), r.sentinel.Name
	if !*noAck {
		r.cfg.AckReplicas, r.cfg.AckTimeout = 1, clusterAck
	}
	if err := r.findSentinelMaster(); err != nil {
		r.t.Fatal(err)
	}
}

// findSentinelMaster points r.lock at the master the Sentinels name.
func (r *run) findSentinelMaster() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := r.sentinel.Master(ctx)
	if err != nil {
		return err
	}
	r.lock = m
	return nil
}

// injectSentinelFailover makes the Sentinels fail the master over (SENTINEL
// FAILOVER, planned: the replica is promoted without waiting for the master's
// last writes) once in the short run and three times in the full one, spread
// over the run, each as a long critical section begins (the hold spans the
// failover). The old master is then made the new one's replica at once (as
// the Sentinels would at their next look at it, up to 10s later) and the
// fault lasts until it is in sync: acquisitions are acknowledged again.
func injectSentinelFailover(r *run, full bool) {
	n := int64(1)
	if full {
		n = 3
	}
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		r.drainEntries()
		if !r.awaitLongEntry(0) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := mono()
		old := r.lock
		promoted, err := r.sentinel.Failover(ctx)
		if err == nil {
			took := time.Duration(mono() - start)
			err = r.demote(ctx, old, promoted)
			r.note(fmt.Sprintf("failover %d: %s promoted %v after SENTINEL FAILOVER, %s its replica in sync %v after it",
				i, promoted, took.Round(time.Millisecond), old, time.Duration(mono()-start).Round(time.Millisecond)))
		}
		cancel()
		if err != nil {
			r.t.Errorf("sentinel failover %d: %v", i, err)
			return
		}
		r.lock = promoted
		r.fault("sentinel failover", start)
	}
}

// demote makes old a replica of master (REPLICAOF, as the Sentinels do) and
// waits until master has it online.
func (r *run) demote(ctx context.Context, old, master *redistest.Server) error {
	host, port, _ := strings.Cut(master.Addr(), ":")
	if _, err := old.Do(ctx, "REPLICAOF", host, port); err != nil {
		return fmt.Errorf("%s: REPLICAOF %s: %w", old, master, err)
	}
	return redistest.WaitReplicas(ctx, master, 1)
}

// undoSentinelFaults points r.lock at the master the Sentinels name, once it
// has its replica back.
func (r *run) undoSentinelFaults() {
	if err := r.findSentinelMaster(); err != nil {
		r.t.Error(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := redistest.WaitReplicas(ctx, r.lock, 1); err != nil {
		r.t.Error(err)
	}
}
