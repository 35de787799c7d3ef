//go:build linux

package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	fullRun     = flag.Bool("chaos.full", os.Getenv("CHAOS_FULL") != "", "run the full chaos suite (minutes) instead of the short one")
	resultsFile = flag.String("chaos.results", "", "write the figures as a markdown table to this file")
	logDir      = flag.String("chaos.logdir", "", "write every operation of every scenario (JSON lines: owner, token, monotonic times, outcome) to this directory")
)

const (
	watchdog    = time.Second     // lease of every hold (the workers' watchdog timeout)
	waitTimeout = 8 * time.Second // bound of every Lock / Acquire
	semLimit    = 2
)

// scenario is one fault pattern applied to one primitive.
type scenario struct {
	name      string
	kind      string // "mutex" or "semaphore"
	shortOps  int64
	fullOps   int64
	longEvery int64 // every longEvery-th operation holds for longHold
	longHold  time.Duration
	inject    func(r *run, full bool)
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
		)
	}
	return out
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	suiteStart := time.Now()
	var mu sync.Mutex
	var results []result
	t.Run("group", func(t *testing.T) {
		for _, sc := range scenarios() {
			t.Run(sc.kind+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
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
stalls and cuts, Redis stalls and dropped pub/sub messages. *Accepted writes*
are fenced read-modify-writes the resource accepted (semaphore: critical
sections run). *Rejected stale writes* are fenced reads or writes the resource
refused because a higher token had been seen (a restart loses the counter,
which then starts again from the server clock, above the old tokens). *Leases lost*
are holds whose context ended with ErrLeaseLost. *Overlaps (excused)* are
entries into the critical section beyond the limit (1 for a Mutex) as the
workload saw them without fencing, each with a holder inside whose lease was
lost. *Violations* break a checked property (fencing, no lost update, no
unexcused overlap, clear errors, contexts ending with the right cause, nothing
left in Redis, no goroutine leak). *Stuck waiters* did not return within the
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
	return []string{res.name, fmt.Sprint(res.ops), fmt.Sprint(res.faults), fmt.Sprint(res.acquired), accepted,
		rejected, fmt.Sprint(res.lostLeases), fmt.Sprint(res.overlaps), fmt.Sprint(len(res.violations)),
		fmt.Sprint(res.stuck), res.recovery.Round(time.Millisecond).String(), res.elapsed.Round(100 * time.Millisecond).String()}
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
// entering a long critical section, one at a time, with its count so far.
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
			if ev.Long {
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
