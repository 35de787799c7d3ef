//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
)

// Cluster scenarios of partial failure (issue #27): a stalled master, a kill
// timed against the watchdog, a dead node that clients try first. The
// cluster is the one of cluster-failover (see cluster_test.go).

// shardSlots are a slot of each master's range in a fresh 3-master cluster:
// failovers move ranges from node to node, never split them.
var shardSlots = []int64{0, 8192, 16383}

// slotOf returns a slot master owns.
func (r *run) slotOf(ctx context.Context, master *redistest.Server) (int64, error) {
	for _, s := range shardSlots {
		if o, err := r.cluster.Owner(ctx, s); err == nil && o == master {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%s owns none of the slots %v", master, shardSlots)
}

// otherSlot returns a slot whose master is not the lock's.
func (r *run) otherSlot(ctx context.Context) (int64, error) {
	lock, err := r.cluster.Owner(ctx, r.lockSlot())
	if err != nil {
		return 0, err
	}
	for _, s := range shardSlots {
		if o, err := r.cluster.Owner(ctx, s); err == nil && o != lock {
			return s, nil
		}
	}
	return 0, errors.New("every shard slot is on the lock's master")
}

// waitDemoted waits until old, a master resumed after its slots were taken
// over, replicates their new owner in sync and the cluster is ok.
func (r *run) waitDemoted(ctx context.Context, old, owner *redistest.Server) error {
	for {
		role, err := r.cluster.Role(ctx, old)
		if err == nil && role.Master == owner.Addr() && role.State == "connected" {
			return r.cluster.WaitOK(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s to replicate %s: %w (role %+v, %v)", old, owner, ctx.Err(), role, err)
		case <-time.After(50 * time.Millisecond): // polling with a deadline
		}
	}
}

// untilProgress returns how long the workers take to start an operation
// more (up to bound), for the notes.
func (r *run) untilProgress(bound time.Duration) time.Duration {
	start, from := mono(), r.progress()
	for r.progress() == from && time.Duration(mono()-start) < bound {
		if !r.pause(20 * time.Millisecond) {
			break
		}
	}
	return time.Duration(mono() - start)
}

// stallExtra is how long a stalled master stays stopped after its replica
// took over: it comes back to find itself replaced.
const stallExtra = 500 * time.Millisecond

// injectMasterStall freezes a master (SIGSTOP) until the cluster has failed
// it over (cluster-node-timeout 1s: 2-4s), and stallExtra more, then lets it
// go on (SIGCONT): it comes back as a stale master, holding connections with
// commands sent to it meanwhile, and is demoted to the new owner's replica.
// Odd stalls hit the lock's master as a long hold begins; even ones a master
// that does not serve the lock (with cluster-require-full-coverage the
// cluster refuses every query while that master is failing, briefly): the
// workers must recover as fast. Twice in the short run, four times in the
// full one, spread over the run.
func injectMasterStall(r *run, full bool) {
	n := int64(2)
	if full {
		n = 4
	}
	for i := int64(1); i <= n; i++ {
		lockMaster := i%2 == 1
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		if lockMaster {
			r.drainEntries()
			if !r.awaitLongEntry(0) {
				return
			}
		}
		if err := r.stallMaster(i, lockMaster); err != nil {
			r.t.Errorf("stall %d: %v", i, err)
			return
		}
	}
}

// stallMaster is one stall of injectMasterStall.
func (r *run) stallMaster(i int64, lockMaster bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, what := r.lockSlot(), "sigstop lock master"
	if !lockMaster {
		var err error
		if s, err = r.otherSlot(ctx); err != nil {
			return err
		}
		what = "sigstop other master"
	}
	victim, err := r.cluster.Owner(ctx, s)
	if err != nil {
		return err
	}
	start, before := mono(), r.progress()
	if err := victim.Pause(); err != nil {
		return err
	}
	promoted, err := r.cluster.WaitNewOwner(ctx, s, victim)
	took := time.Duration(mono() - start)
	if err == nil {
		time.Sleep(stallExtra) // the rest of the stall
	}
	if rerr := victim.Resume(); err == nil {
		err = rerr
	}
	stalled := time.Duration(mono() - start)
	during := r.progress() - before
	if err == nil {
		err = r.waitDemoted(ctx, victim, promoted)
	}
	if err != nil {
		return err
	}
	r.fault(what, start)
	after := r.untilProgress(30 * time.Second)
	r.note(fmt.Sprintf("stall %d (%s, slot %d): %s took over %v after the SIGSTOP, stopped %v, demoted %v after it; %d operation(s) started during the stall, the next %v after the fault",
		i, what, s, promoted, took.Round(time.Millisecond), stalled.Round(time.Millisecond),
		time.Duration(mono()-start).Round(time.Millisecond), during, after.Round(time.Millisecond)))
	return nil
}

// awaitLongEvent is awaitLongEntry, returning the entry.
func (r *run) awaitLongEvent() (event, bool) {
	for {
		select {
		case <-r.ctx.Done():
			return event{}, false
		case ev := <-r.entered:
			if ev.Long {
				return ev, true
			}
		}
	}
}

// opOf waits up to within for the outcome of owner's operation.
func (r *run) opOf(owner string, within time.Duration) (event, bool) {
	deadline := time.Now().Add(within)
	for {
		r.mu.Lock()
		for _, e := range r.events {
			if e.Owner == owner {
				r.mu.Unlock()
				return e, true
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			return event{}, false
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

// killLead is how long before a watchdog round is due injectKillWatchdog
// kills: the round comes while the master is down.
const killLead = 150 * time.Millisecond

// injectKillWatchdog kills the lock's master (SIGKILL) just before the
// watchdog renews a long hold: killLead before a third of the lease has
// passed since the hold began (rounds come every third of the lease, on a
// ticker of the holder's Client, so one comes during the failover whatever
// its phase). The renewals fail until the replica is promoted and must be
// retried on it before the lease (acknowledged on the replica at the
// acquisition) runs out there. The killed master then rejoins as a replica.
// Once in the short run, three times in the full one, spread over the run.
func injectKillWatchdog(r *run, full bool) {
	n := int64(1)
	if full {
		n = 3
	}
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		r.drainEntries()
		ev, ok := r.awaitLongEvent()
		if !ok {
			return
		}
		due := ev.TAcq + int64(r.cfg.Watchdog/3-killLead)
		if d := time.Duration(due - mono()); d > 0 {
			time.Sleep(d) // fault timing
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := mono()
		old, _, err := r.cluster.KillPrimary(ctx, r.lockSlot())
		took := time.Duration(mono() - start)
		if err == nil {
			r.fault("kill master before a renewal", start)
			_, err = r.cluster.Rejoin(ctx, old)
		}
		cancel()
		if err != nil {
			r.t.Errorf("kill %d: %v", i, err)
			return
		}
		outcome := "not reported"
		if e, ok := r.opOf(ev.Owner, 2*r.cfg.LongHold+30*time.Second); ok {
			outcome = fmt.Sprintf("cause %s, release %s, write accepted %v", e.Cause, e.ReleaseClass, e.WriteOK)
		}
		r.note(fmt.Sprintf("kill %d: %v after %s entered its long hold; the replica took over %v after the kill; the hold: %s",
			i, time.Duration(start-ev.TAcq).Round(time.Millisecond), ev.Owner, took.Round(time.Millisecond), outcome))
	}
}

// lowestNode is the node with the lowest address in string order: the first
// a client tries for a slot whose owner it does not know.
func (r *run) lowestNode() *redistest.Server {
	var low *redistest.Server
	for _, s := range r.cluster.Nodes() {
		if low == nil || s.Addr() < low.Addr() {
			low = s
		}
	}
	return low
}

// promote makes s the master of its shard (a coordinated CLUSTER FAILOVER)
// unless it is one.
func (r *run) promote(ctx context.Context, s *redistest.Server) error {
	role, err := r.cluster.Role(ctx, s)
	if err != nil || role.Master == "" {
		return err
	}
	var master *redistest.Server
	for _, n := range r.cluster.Nodes() {
		if n.Addr() == role.Master {
			master = n
		}
	}
	if master == nil {
		return fmt.Errorf("%s replicates %s, not a node of the cluster", s, role.Master)
	}
	sl, err := r.slotOf(ctx, master)
	if err != nil {
		return err
	}
	_, got, err := r.cluster.Failover(ctx, sl, "")
	if err == nil && got != s {
		err = fmt.Errorf("%s was promoted, not %s", got, s)
	}
	return err
}

// setupDeadLowest makes the lowest node a master and names the lock so that
// it lives on that node (serves) or on another master (!serves).
func setupDeadLowest(serves bool) func(r *run) {
	return func(r *run) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		low := r.lowestNode()
		if err := r.promote(ctx, low); err != nil {
			r.t.Fatalf("promote %s: %v", low, err)
		}
		for i := range 1000 {
			name := fmt.Sprintf("res%d", i)
			o, err := r.cluster.Owner(ctx, int64(slot.Of("{"+name+"}")))
			if err != nil {
				r.t.Fatal(err)
			}
			if (o == low) == serves {
				r.cfg.Name = name
				break
			}
		}
		if err := r.findLockMaster(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// deadFor is how long the lowest node stays dead once the cluster is ok
// again without it.
const deadFor = 5 * time.Second

// injectDeadLowest kills the lowest node, keeps it dead deadFor past the
// failover (if it was a master), then brings it back as a replica: once in
// the short run, twice in the full one, spread over the run. Where it serves
// the lock it is made master again before each kill (a coordinated
// failover): every kill is then a failover of the lock's master. Where it
// does not, the second kill finds it a replica. Either way the workers must
// go on: every subscription that tried it first finds the lock's master.
func injectDeadLowest(r *run, full bool) {
	n := int64(1)
	if full {
		n = 2
	}
	low := r.lowestNode()
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		if err := r.killLowest(i, low); err != nil {
			r.t.Errorf("kill %d of %s: %v", i, low, err)
			return
		}
	}
}

// killLowest is one kill of injectDeadLowest.
func (r *run) killLowest(i int64, low *redistest.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lockOwner, err := r.cluster.Owner(ctx, r.lockSlot())
	if err != nil {
		return err
	}
	serves := false
	if role, err := r.cluster.Role(ctx, low); err != nil {
		return err
	} else if role.Master == lockOwner.Addr() {
		serves = true
		start := mono()
		if err := r.promote(ctx, low); err != nil {
			return err
		}
		r.fault("promote the lowest node", start)
	} else if lockOwner == low {
		serves = true
	}
	what := "kill lowest node (a replica)"
	var sl int64 = -1
	if role, _ := r.cluster.Role(ctx, low); role.Master == "" {
		what = "kill lowest node (a master)"
		if sl, err = r.slotOf(ctx, low); err != nil {
			return err
		}
	}
	if serves {
		what += ", the lock's"
	}
	start := mono()
	if err := low.Kill(); err != nil {
		return err
	}
	if sl >= 0 {
		if _, err := r.cluster.WaitNewOwner(ctx, sl, low); err != nil {
			return err
		}
	}
	r.fault(what, start)
	took := time.Duration(mono() - start)
	before := r.progress()
	time.Sleep(deadFor) // the node stays dead
	during := r.progress() - before
	if _, err := r.cluster.Rejoin(ctx, low); err != nil {
		return err
	}
	if !serves && during == 0 {
		r.t.Errorf("kill %d (%s): no operation started in the %v the cluster was ok without it", i, what, deadFor)
	}
	r.note(fmt.Sprintf("kill %d (%s %s): cluster ok again %v after the kill; %d operation(s) started in the %v it then stayed dead",
		i, what, low, took.Round(time.Millisecond), during, deadFor))
	return nil
}
