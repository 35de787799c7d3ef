//go:build linux

package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

var (
	fullRun     = flag.Bool("chaos.full", os.Getenv("CHAOS_FULL") != "", "run the full chaos suite (minutes) instead of the short one")
	resultsFile = flag.String("chaos.results", "", "write the figures as a markdown table to this file")
	logDir      = flag.String("chaos.logdir", "", "write every operation of every scenario (JSON lines: owner, token, monotonic times, outcome) to this directory")
	functions   = flag.Bool("chaos.functions", false, "workers run the lock scripts as Redis functions (rlock.WithRedisFunctions(true))")
	only        = flag.String("chaos.only", "", "run only the scenarios whose kind/name (e.g. mutex/lost-replies) matches this regular expression")
)

const (
	watchdog    = time.Second     // lease of every hold (the workers' watchdog timeout)
	waitTimeout = 8 * time.Second // bound of every Lock / Acquire
	semLimit    = 2
	rwWrites    = 8 // an RWMutex run writes in every 8th operation (and every other long one)
)

// scenario is one fault pattern applied to one primitive.
type scenario struct {
	name      string
	kind      string // "mutex", "semaphore" or "rw" (RWMutex)
	shortOps  int64
	fullOps   int64
	longEvery int64 // every longEvery-th operation holds for longHold
	longHold  time.Duration
	inject    func(r *run, full bool)

	fullOnly bool // not part of the short suite
	// alone: runs before the others, not beside them. Its checker has a
	// timing window (a ForceUnlock is heard within 10ms), which the load of
	// a parallel scenario (a cluster's six servers, say) can stretch.
	alone      bool
	goroutines int  // goroutines per worker process sharing one Client (0: goroutines)
	reenter    bool // every hold re-enters once (Mutex) and unlocks that level before the last
	acl        bool // workers connect as the ACL user aclUser, whose rights the fault changes
	// cluster: the lock lives on a 3-master cluster with a replica each,
	// reached by cluster clients that ask for replica acknowledgement (see
	// cluster_test.go); the faults are failovers.
	cluster bool
	// sendToReplicas: the workers' cluster clients send read-only commands
	// to replicas (see workerConfig.SendToReplicas).
	sendToReplicas bool
	// sentinel: the lock lives on a master with one replica watched by three
	// Sentinels, reached by Sentinel clients that ask for replica
	// acknowledgement (see sentinel_test.go); the faults are failovers.
	sentinel bool
	// setup runs once the servers are up, before the workers start (it may
	// pick the lock's name, say).
	setup func(r *run)
	lease time.Duration // the workers' watchdog timeout (0: watchdog)
}

// leaseOf is the lease of the scenario's holds.
func (sc scenario) leaseOf() time.Duration {
	if sc.lease > 0 {
		return sc.lease
	}
	return watchdog
}

func scenarios() []scenario {
	var out []scenario
	for _, kind := range []string{"mutex", "semaphore"} {
		out = append(out,
			scenario{name: "conn-kill", kind: kind, shortOps: 100, fullOps: 1000, inject: injectConnKill},
			scenario{name: "redis-restart", kind: kind, shortOps: 60, fullOps: 1000, inject: injectRestart},
			scenario{name: "holder-paused", kind: kind, shortOps: 40, fullOps: 400, longEvery: 10, longHold: 500 * time.Millisecond, inject: injectHolderPause},
			scenario{name: "watchdog-cut", kind: kind, shortOps: 40, fullOps: 400, longEvery: 10, longHold: 5 * watchdog / 2, inject: injectWatchdogCut},
			scenario{name: "redis-stalled", kind: kind, shortOps: 60, fullOps: 1000, inject: injectRedisStall},
			scenario{name: "lost-wakeups", kind: kind, shortOps: 60, fullOps: 1000, inject: injectLostWakeups},
			scenario{name: "lost-replies", kind: kind, shortOps: 60, fullOps: 4000, goroutines: 4, reenter: true, fullOnly: true, inject: injectLostReplies},
			scenario{name: "acl-revoked", kind: kind, shortOps: 60, fullOps: 1000, acl: true, fullOnly: true, inject: injectACLRevoke},
		)
	}
	// The semaphore has no administrative reset (nothing like ForceUnlock
	// that takes permits from their holders), so this one is Mutex only.
	out = append(out, scenario{name: "force-unlock", kind: "mutex", shortOps: 150, fullOps: 1000, goroutines: 4, alone: true, inject: injectForceUnlock})
	// A Redis Cluster whose lock master is killed and replaced by its
	// replica: Mutex only, the lock kind WithReplicaAck covers.
	// Every 50th hold lasts 4s, and each kill comes as one begins: the hold
	// spans the failover (2-4s), which the lease (5s) may outlast. One
	// goroutine per worker: every acquisition is a write to Redis (no lock
	// passed within a Client), which a failover can lose.
	out = append(out, scenario{name: "cluster-failover", kind: "mutex", shortOps: 60, fullOps: 500, longEvery: 50, longHold: 4 * time.Second,
		goroutines: 1, cluster: true, lease: clusterLease, inject: injectPrimaryKill})
	// Partial failures of the cluster (full only): a master stopped
	// (SIGSTOP) until its replica took over, the lock's and another; the
	// lock's master killed just before a watchdog round of a long hold that
	// outlasts the lease (its renewals must be retried on the promoted
	// replica); the node with the lowest address, which clients try first,
	// killed and kept dead, serving the lock or not; the failover scenario
	// with clients that send read-only commands to replicas.
	out = append(out,
		scenario{name: "cluster-master-stalled", kind: "mutex", shortOps: 60, fullOps: 400, longEvery: 50, longHold: 4 * time.Second,
			goroutines: 1, cluster: true, lease: clusterLease, fullOnly: true, inject: injectMasterStall},
		scenario{name: "cluster-kill-watchdog", kind: "mutex", shortOps: 60, fullOps: 300, longEvery: 30, longHold: 6 * time.Second,
			goroutines: 1, cluster: true, lease: clusterLease, fullOnly: true, inject: injectKillWatchdog},
		scenario{name: "cluster-dead-lowest", kind: "mutex", shortOps: 60, fullOps: 400, longEvery: 50, longHold: 4 * time.Second,
			goroutines: 1, cluster: true, lease: clusterLease, fullOnly: true, setup: setupDeadLowest(true), inject: injectDeadLowest},
		scenario{name: "cluster-dead-lowest-other", kind: "mutex", shortOps: 60, fullOps: 400, longEvery: 50, longHold: 4 * time.Second,
			goroutines: 1, cluster: true, lease: clusterLease, fullOnly: true, setup: setupDeadLowest(false), inject: injectDeadLowest},
		scenario{name: "cluster-send-to-replicas", kind: "mutex", shortOps: 60, fullOps: 500, longEvery: 50, longHold: 4 * time.Second,
			goroutines: 1, cluster: true, sendToReplicas: true, lease: clusterLease, fullOnly: true, inject: injectPrimaryKill},
	)
	// A master watched by Sentinels, failed over by plan (SENTINEL
	// FAILOVER) as long holds begin, through Sentinel clients with replica
	// acknowledgement (full only).
	out = append(out, scenario{name: "sentinel-failover", kind: "mutex", shortOps: 60, fullOps: 500, longEvery: 50, longHold: 4 * time.Second,
		goroutines: 1, sentinel: true, lease: clusterLease, fullOnly: true, inject: injectSentinelFailover})
	// The RWMutex, mostly readers: one scenario per kind of fault in the
	// short suite (a killed connection, a paused holder, a stalled server),
	// the others in the full one. It has no ForceUnlock.
	out = append(out,
		scenario{name: "conn-kill", kind: "rw", shortOps: 100, fullOps: 1000, inject: injectConnKill},
		scenario{name: "redis-restart", kind: "rw", shortOps: 60, fullOps: 1000, fullOnly: true, inject: injectRestart},
		scenario{name: "holder-paused", kind: "rw", shortOps: 40, fullOps: 400, longEvery: 10, longHold: 500 * time.Millisecond, inject: injectHolderPause},
		scenario{name: "watchdog-cut", kind: "rw", shortOps: 40, fullOps: 400, longEvery: 10, longHold: 5 * watchdog / 2, fullOnly: true, inject: injectWatchdogCut},
		scenario{name: "redis-stalled", kind: "rw", shortOps: 60, fullOps: 1000, inject: injectRedisStall},
		scenario{name: "lost-wakeups", kind: "rw", shortOps: 60, fullOps: 1000, fullOnly: true, inject: injectLostWakeups},
		scenario{name: "lost-replies", kind: "rw", shortOps: 60, fullOps: 4000, goroutines: 4, fullOnly: true, inject: injectLostReplies},
		scenario{name: "acl-revoked", kind: "rw", shortOps: 60, fullOps: 1000, acl: true, fullOnly: true, inject: injectACLRevoke},
	)
	return out
}

// selected reports whether the scenario runs in this invocation.
func (sc scenario) selected() bool {
	if !*fullRun && sc.fullOnly {
		return false
	}
	if *only == "" {
		return true
	}
	re, err := regexp.Compile(*only)
	return err == nil && re.MatchString(sc.kind+"/"+sc.name)
}

func (sc scenario) workerGoroutines() int {
	if sc.goroutines > 0 {
		return sc.goroutines
	}
	return goroutines
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	if *only != "" {
		if _, err := regexp.Compile(*only); err != nil {
			t.Fatalf("-chaos.only: %v", err)
		}
	}
	suiteStart := time.Now()
	var mu sync.Mutex
	var results []result
	t.Run("group", func(t *testing.T) {
		for _, sc := range scenarios() {
			if !sc.selected() {
				continue
			}
			t.Run(sc.kind+"/"+sc.name, func(t *testing.T) {
				if !sc.alone {
					t.Parallel() // paused until the alone ones have run
				}
				ops := sc.shortOps
				if *fullRun {
					ops = sc.fullOps
				}
				res := execute(t, sc, ops)
				res.name = sc.kind + "/" + sc.name
				for _, v := range res.violations {
					t.Errorf("violation: %s", v)
				}
				t.Logf("%s", res.row())
				if n := res.notes(); n != "" {
					t.Logf("%s", n)
				}
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			})
		}
	})
	table := formatTable(results)
	t.Logf("\n%s", table)
	if *resultsFile != "" {
		mode := "short"
		if *fullRun {
			mode = "full"
		}
		cmd := "`make chaos` (`go test -race -count=1 -run '^TestChaos$' -timeout 30m ./chaos -chaos.full -chaos.results=RESULTS.md`)"
		if !*fullRun {
			cmd = "`go test -race -count=1 -run '^TestChaos$' ./chaos -chaos.results=RESULTS.md` (short suite)"
		}
		text := fmt.Sprintf("Measured %s UTC with %s in %v on %d CPUs: %s suite, %d worker processes x %d goroutines, "+
			"lease (watchdog timeout) %v, wait timeout %v, semaphore limit %d.\n\n%s",
			time.Now().UTC().Format("2006-01-02 15:04"), cmd, time.Since(suiteStart).Round(time.Second), runtime.NumCPU(),
			mode, workers, goroutines, watchdog, waitTimeout, semLimit, table) + legend
		if err := os.WriteFile(*resultsFile, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}
}

const legend = `
Columns: *faults injected* counts connection kills, restarts, SIGSTOPs, proxy
stalls and cuts, Redis stalls, dropped pub/sub messages, lost replies, ACL
revocations and force-unlocks that deleted a lock. *Accepted writes*
are fenced read-modify-writes the resource accepted (semaphore: critical
sections run; RWMutex: the writers', then the readers' fenced reads, two per
read hold, under the token of the last writer). *Rejected stale writes* are fenced reads or writes the resource
refused because a higher token had been seen (a restart loses the counter,
which then starts again from the server clock, above the old tokens). *Leases lost*
are holds whose context ended with ErrLeaseLost. *Overlaps (excused)* are
entries into the critical section beyond the limit (1 for a Mutex) as the
workload saw them without fencing, each with a holder inside whose lease was
lost (after a force-unlock: each holder inside but the one with the highest
token lost its lease, and none was granted the lock after the force-unlock
with an older token; RWMutex: entries that found a writer inside with
anyone else, each such pair with one whose lease was lost). *Violations* break a checked property (fencing, no lost update, no
unexcused overlap, clear errors, contexts ending with the right cause, nothing
left in Redis, no goroutine leak, no hold granted after a force-unlock with a
token issued before it; RWMutex: no read accepted after a write under a higher
token nor a write after a read under the same or a higher one, no change seen
by a reader during its hold, no worker whose writes never got the lock). *Stuck waiters* did not return within the
wait timeout + 15s. *Longest recovery* runs from the end of a fault to the
next acquisition by any worker.
`

var tableHeader = []string{"scenario", "operations", "faults injected", "acquired", "accepted writes",
	"rejected stale writes", "leases lost", "overlaps (excused)", "violations", "stuck waiters", "longest recovery", "time"}

func (res result) cells() []string {
	accepted := fmt.Sprint(res.accepted)
	rejected := fmt.Sprint(res.rejected)
	if strings.HasPrefix(res.name, "semaphore") {
		rejected = "n/a (no token)"
	}
	if strings.HasPrefix(res.name, "rw/") {
		accepted = fmt.Sprintf("%d (+%d reads)", res.accepted, res.acceptedReads)
	}
	return []string{res.name, fmt.Sprint(res.ops), fmt.Sprint(res.faults), fmt.Sprint(res.acquired), accepted,
		rejected, fmt.Sprint(res.lostLeases), fmt.Sprint(res.overlaps), fmt.Sprint(len(res.violations)),
		fmt.Sprint(res.stuck), res.recovery.Round(time.Millisecond).String(), res.elapsed.Round(100 * time.Millisecond).String()}
}

// kinds lists the violations by kind, most frequent first, for the notes.
func (res result) kinds() string {
	counts := map[string]int{}
	var order []string
	for _, v := range res.violations {
		k := violationKind(v)
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d x %s", counts[k], k))
	}
	return strings.Join(parts, ", ")
}

// notes lists the figures that are not in the table: failed acquisitions
// (all with clear errors) and oddities that are not violations.
func (res result) notes() string {
	var parts []string
	if res.timeouts > 0 {
		parts = append(parts, fmt.Sprintf("%d wait(s) ended by the wait timeout", res.timeouts))
	}
	if res.errs > 0 {
		parts = append(parts, fmt.Sprintf("%d acquisition(s) failed at once with a Redis or connection error", res.errs))
	}
	if res.foreignDeadlines > 0 {
		parts = append(parts, fmt.Sprintf("%d of them matching context.DeadlineExceeded although neither the caller's context nor the wait timeout had ended", res.foreignDeadlines))
	}
	if res.permErrs > 0 {
		parts = append(parts, fmt.Sprintf("%d call(s) failed at once with a permission error (NOPERM, or a command refused to a script)", res.permErrs))
	}
	if res.reenterErrs > 0 {
		parts = append(parts, fmt.Sprintf("%d re-entr(y/ies) failed with a clear error", res.reenterErrs))
	}
	if res.readHolds+res.writeHolds > 0 {
		parts = append(parts, fmt.Sprintf("%d read holds and %d write holds (of %d and %d attempts; by worker: %s); longest wait for the write lock %v, for the read lock %v",
			res.readHolds, res.writeHolds, res.readAttempts, res.writeAttempts, res.progress,
			res.writeWait.Round(time.Millisecond), res.readWait.Round(time.Millisecond)))
	}
	parts = append(parts, res.remarks...)
	if len(res.violations) > 0 {
		parts = append(parts, "violations: "+res.kinds())
	}
	if res.windowPasses > 0 {
		parts = append(parts, fmt.Sprintf("%d local pass(es) made within %v of a force-unlock, before the Client heard of it (the documented window; tokens stayed in order at the resource)", res.windowPasses, forceUnlockWindow))
	}
	if res.lateReleases > 0 {
		parts = append(parts, fmt.Sprintf("%d release(s) succeeded in Redis after the client had declared the lease lost", res.lateReleases))
	}
	if len(parts) == 0 {
		return ""
	}
	return res.name + ": " + strings.Join(parts, "; ") + "."
}

func (res result) row() string { return "| " + strings.Join(res.cells(), " | ") + " |" }

func formatTable(results []result) string {
	order := map[string]int{}
	for i, sc := range scenarios() {
		order[sc.kind+"/"+sc.name] = i
	}
	sorted := append([]result(nil), results...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if order[sorted[j].name] < order[sorted[i].name] {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(tableHeader, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(tableHeader)) + "\n")
	for _, res := range sorted {
		b.WriteString(res.row() + "\n")
	}
	b.WriteString("\n")
	for _, res := range sorted {
		if n := res.notes(); n != "" {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

// injectConnKill kills the lock server's pub/sub connections and its normal
// (command) connections, alternately, spread evenly over the run: 20 times in
// the short run, 200 in the full one. The proxies add 1ms of latency each way.
func injectConnKill(r *run, full bool) {
	for _, p := range r.proxies {
		p.SetLatency(time.Millisecond) // a network with some latency
	}
	n := int64(20)
	if full {
		n = 200
	}
	types := []string{"pubsub", "normal"}
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		typ := types[i%2]
		start := mono()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.lock.KillClients(ctx, typ)
		cancel()
		if err != nil {
			r.t.Errorf("CLIENT KILL TYPE %s: %v", typ, err)
			return
		}
		r.fault("kill "+typ, start)
	}
}

// injectRestart kills the lock server (SIGKILL, no persistence: every key is
// lost) and restarts it after 300ms, once in the short run and three times
// in the full one, spread over the run.
func injectRestart(r *run, full bool) {
	n := int64(1)
	if full {
		n = 3
	}
	for i := int64(1); i <= n; i++ {
		if !r.waitProgress(r.cfg.Total * i / (n + 1)) {
			return
		}
		start := mono()
		if err := r.lock.Kill(); err != nil {
			r.t.Errorf("kill: %v", err)
			return
		}
		time.Sleep(300 * time.Millisecond) // the outage
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.lock.Restart(ctx)
		cancel()
		if err != nil {
			r.t.Errorf("restart: %v", err)
			return
		}
		r.fault("restart", start)
	}
}

// onLongHolds calls fault for each of the first 2 (full: 10) workers seen
// entering a long critical section, one at a time, with its count so far
// (RWMutex: writers and readers in turn, still in it).
func onLongHolds(r *run, full bool, fault func(ev event, n int)) {
	limit := 2
	if full {
		limit = 10
	}
	for n := 0; n < limit; {
		select {
		case <-r.ctx.Done():
			return
		case ev := <-r.entered:
			// A long hold still in its critical section: one that
			// entered while an earlier fault went on is skipped, as the
			// fault would miss it. (Not skipping them, a holder-paused
			// run could stop one worker again and again, back to back,
			// on its entries queued meanwhile: 10s and more in all, past
			// its resource client's ping timeout, which then failed its
			// write and ended the worker.) RWMutex: a writer first, then
			// a reader, in turn.
			rw := r.sc.kind == "rw"
			fresh := time.Duration(mono()-ev.TAcq) < r.sc.longHold/2
			if ev.Long && fresh && (!rw || ev.Write == (n%2 == 0)) {
				fault(ev, n)
				n++
			}
		}
	}
}

// injectHolderPause freezes a worker process (SIGSTOP) that has just entered
// a long critical section, for 2.5 leases, then lets it go on (SIGCONT): its
// lease runs out meanwhile and another worker takes the lock.
func injectHolderPause(r *run, full bool) {
	onLongHolds(r, full, func(ev event, _ int) {
		start := mono()
		r.signal(ev.Worker, syscall.SIGSTOP)
		r.target(ev.Owner, "paused", start)
		time.Sleep(5 * watchdog / 2) // the pause
		r.signal(ev.Worker, syscall.SIGCONT)
		r.fault("sigstop holder", start)
	})
}

// injectWatchdogCut cuts a worker that has just entered a long critical
// section off from Redis for 1.6 leases: its proxy stalls (connections open,
// nothing moves) or cuts its connections and refuses new ones, alternately.
// Its watchdog cannot renew, so the lease runs out; the critical section goes
// on past it and then tries its (stale) write.
func injectWatchdogCut(r *run, full bool) {
	onLongHolds(r, full, func(ev event, n int) {
		p := r.proxies[ev.Worker]
		start := mono()
		kind := "proxy stall"
		if n%2 == 0 {
			p.Stall()
		} else {
			kind = "proxy cut"
			p.Block(true)
			p.Cut()
		}
		r.target(ev.Owner, kind, start)
		time.Sleep(8 * watchdog / 5) // the partition
		p.Resume()
		p.Block(false)
		r.fault(kind, start)
	})
}

// injectRedisStall stalls the whole lock server in turn with CLIENT PAUSE,
// DEBUG SLEEP and SIGSTOP, for half a lease and for 1.5 leases: each of the
// six once in the short run, five times in the full one, spread over the run.
func injectRedisStall(r *run, full bool) {
	steps := []struct {
		kind string
		d    time.Duration
	}{
		{"client pause", watchdog / 2}, {"debug sleep", watchdog / 2}, {"sigstop redis", watchdog / 2},
		{"client pause", 3 * watchdog / 2}, {"debug sleep", 3 * watchdog / 2}, {"sigstop redis", 3 * watchdog / 2},
	}
	n := int64(len(steps))
	if full {
		n *= 5
	}
	for i := int64(0); i < n; i++ {
		if !r.waitProgress(r.cfg.Total * (i + 1) / (n + 1)) {
			return
		}
		s := steps[i%int64(len(steps))]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := mono()
		var err error
		switch s.kind {
		case "client pause":
			if err = r.lock.ClientPause(ctx, s.d, "ALL"); err == nil {
				time.Sleep(s.d) // the pause ends by itself
			}
		case "debug sleep":
			err = r.lock.DebugSleep(ctx, s.d)
		case "sigstop redis":
			if err = r.lock.Pause(); err == nil {
				time.Sleep(s.d) // the pause
				err = r.lock.Resume()
			}
		}
		cancel()
		if err != nil {
			r.t.Errorf("%s: %v", s.kind, err)
			return
		}
		r.fault(s.kind, start)
	}
}

// injectLostWakeups drops every pub/sub message (unlock and wake messages)
// on the way to the workers for 2s out of every 2.7s.
func injectLostWakeups(r *run, _ bool) {
	set := func(on bool) {
		for _, p := range r.proxies {
			p.DropMessages(on)
		}
	}
	for {
		start := mono()
		set(true)
		ok := r.pause(2 * time.Second)
		set(false)
		r.fault("drop", start)
		if !ok || !r.pause(700*time.Millisecond) {
			return
		}
	}
}

// commandKind names what a command sent to the lock server does, from its
// keys (see internal/lua): "acquire", "reenter", "release", "renew",
// "abandon", "force-unlock", or "other" (not a script of this module).
func commandKind(args []string) string {
	if len(args) < 3 {
		return "other"
	}
	switch strings.ToUpper(args[0]) {
	case "EVALSHA", "EVAL", "FCALL":
	default:
		return "other"
	}
	nk, err := strconv.Atoi(args[2])
	if err != nil || nk < 1 || len(args) < 3+nk {
		return "other"
	}
	keys, argv := args[3:3+nk], args[3+nk:]
	has := func(i int, s string) bool { return i < len(keys) && strings.Contains(keys[i], s) }
	switch {
	case nk == 7 && has(2, ":gone:") && !has(2, ":sem:"): // acquire.lua
		if len(argv) > 2 && argv[2] == "1" {
			return "reenter"
		}
		return "acquire"
	case nk == 7 && has(1, ":latch:") && !has(1, ":sem:"): // release.lua
		return "release"
	case nk == 5 && has(1, ":gone:"): // abandon.lua
		return "abandon"
	case nk == 4 && has(1, ":queue"): // forceunlock.lua
		return "force-unlock"
	case nk == 6 && has(5, ":sem:gone:"): // sem_acquire.lua or sem_abandon.lua
		if len(argv) == 5 {
			return "abandon"
		}
		return "acquire"
	case nk == 6 && has(5, ":sem:latch:"): // sem_release.lua
		return "release"
	case nk >= 8 && has(7, ":gone:") && len(argv) > 3 && has(0, ":rw"): // rw_acquire.lua or rw_abandon.lua
		switch {
		case len(argv) < 12: // rw_abandon.lua takes 9 ARGV, rw_acquire.lua 13
			return "abandon"
		case argv[3] == "1":
			return "reenter"
		}
		return "acquire"
	case nk == 9 && has(7, ":latch:") && has(0, ":rw"): // rw_release.lua
		return "release"
	case strings.HasSuffix(keys[0], ":sem:permits"), strings.HasSuffix(keys[0], "}"), // renew.lua, sem_renew.lua
		strings.HasSuffix(keys[0], ":rw"), strings.HasSuffix(keys[0], ":rw:r"): // renew.lua on an RWMutex writer, rw_renew.lua
		return "renew"
	}
	return "other"
}

// injectLostReplies loses the reply of a command of a worker on its way back
// (the proxy forwards the command, drops what the server sends back and cuts
// the connection once the server has answered it): up to 20 times in the
// short run, 150 in the full one. One loss is kept armed on every worker's
// proxy (re-armed 50ms after it happened), aimed in turn at an acquisition, a
// re-entry (Mutex), a release and a renewal of the watchdog. Every such
// command ran in Redis; its caller only sees the connection drop.
func injectLostReplies(r *run, full bool) {
	n := 20
	if full {
		n = 150
	}
	targets := []string{"acquire", "release", "renew"}
	if r.sc.kind == "mutex" {
		targets = []string{"acquire", "reenter", "release", "renew"}
	}
	type armed struct {
		done  <-chan struct{}
		want  string
		start int64
	}
	arm := func(p int, i int) armed {
		want := targets[i%len(targets)]
		return armed{done: r.proxies[p].LoseReply(func(args []string) bool { return commandKind(args) == want }), want: want, start: mono()}
	}
	next := 0
	cur := make([]armed, len(r.proxies))
	for p := range cur {
		cur[p] = arm(p, next)
		next++
	}
	defer func() {
		for _, p := range r.proxies {
			p.CancelLosses()
		}
	}()
	for lost := 0; lost < n; {
		// Wait for any of the armed losses (polling the handful of channels).
		// A loss armed for a command a worker no longer sends (a Client that
		// takes the lock by hand-off messages runs no acquire script) is
		// aimed at the next kind after a second.
		hit := -1
		for hit < 0 {
			for p, a := range cur {
				select {
				case <-a.done:
					hit = p
				default:
					if time.Duration(mono()-a.start) > time.Second {
						r.proxies[p].CancelLosses()
						cur[p] = arm(p, next)
						next++
					}
				}
				if hit >= 0 {
					break
				}
			}
			if hit < 0 && !r.pause(5*time.Millisecond) {
				return
			}
		}
		r.fault("lost reply ("+cur[hit].want+")", cur[hit].start)
		lost++
		if !r.pause(50 * time.Millisecond) {
			return
		}
		cur[hit] = arm(hit, next)
		next++
	}
}

// The ACL user the workers connect as in the acl-revoked scenarios: every
// command on the keys and channels under the prefix.
const (
	aclUser     = "relock"
	aclPassword = "pw"
)

var aclRules = []string{"on", ">" + aclPassword, "~chaos:*", "&chaos:*", "+@all"}

// aclRestore gives the user back every right a revocation took.
var aclRestore = []string{"+@all", "&chaos:*"}

// injectACLRevoke takes a right the scripts need away from the workers' ACL
// user for 1.5 leases, then gives it back: three revocations in the short
// run, six in the full one, spread over the run (the last at 6/7 of it, so
// that recovery is exercised too). Mutex: PEXPIRE (acquire,
// renew and re-entry scripts fail halfway), PUBLISH (releases and hand-offs
// fail at their announcement) and the channel pattern (subscriptions and
// publications refused; Redis also disconnects the subscribed connections).
// Semaphore: PUBLISH, ZADD (acquisitions and renewals fail halfway) and the
// channel pattern.
func injectACLRevoke(r *run, full bool) {
	revocations := [][]string{{"-pexpire"}, {"-publish", "-spublish"}, {"resetchannels"}} // Mutex and RWMutex
	if r.sc.kind == "semaphore" {
		revocations = [][]string{{"-publish", "-spublish"}, {"-zadd"}, {"resetchannels"}}
	}
	n := int64(len(revocations))
	if full {
		n *= 2
	}
	for i := int64(0); i < n; i++ {
		if !r.waitProgress(r.cfg.Total * (i + 1) / (n + 1)) {
			return
		}
		rules := revocations[i%int64(len(revocations))]
		start := mono()
		if err := r.setACL(rules...); err != nil {
			r.t.Errorf("ACL SETUSER %s %v: %v", aclUser, rules, err)
			return
		}
		r.pause(3 * watchdog / 2) // the revocation; cut short when the run ends
		if err := r.setACL(aclRestore...); err != nil {
			r.t.Errorf("ACL SETUSER %s %v: %v", aclUser, aclRestore, err)
			return
		}
		r.fault("acl "+strings.Join(rules, " "), start)
	}
}

// injectForceUnlock calls Mutex.ForceUnlock from the controller (a Client of
// its own, straight to the lock server) every 20 to 120ms while the workers
// contend, reading the fencing counter just before each call: a hold granted
// after a force-unlock that deleted a lock must carry a token above it.
func injectForceUnlock(r *run, _ bool) {
	rc, err := r.lock.Client()
	if err != nil {
		r.t.Errorf("force-unlock client: %v", err)
		return
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix(r.cfg.Prefix))
	if err != nil {
		r.t.Errorf("force-unlock client: %v", err)
		return
	}
	defer c.Close()
	m := c.Mutex(r.cfg.Name)
	fenceKey := r.cfg.Prefix + ":{" + r.cfg.Name + "}:fence"
	for r.pause(time.Duration(20+rand.IntN(100)) * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fence, err := rc.Do(ctx, rc.B().Get().Key(fenceKey).Build()).AsUint64()
		if rueidis.IsRedisNil(err) {
			fence, err = 0, nil
		}
		start := mono()
		var deleted bool
		if err == nil {
			deleted, err = m.ForceUnlock(ctx)
		}
		end := mono()
		cancel()
		if err != nil {
			r.t.Errorf("force unlock: %v", err)
			return
		}
		r.mu.Lock()
		r.forced = append(r.forced, forceUnlock{start: start, end: end, fence: fence, deleted: deleted})
		r.mu.Unlock()
		if deleted {
			r.fault("force unlock", start)
		}
	}
}
