// Command bench runs rlock.Mutex and its peers side by side against one
// Redis and reports what each lock costs: throughput, waits, hand-off
// latency, Redis commands and CPU per acquisition, fairness, and whether it
// stayed correct and left nobody waiting on a free lock.
//
// Without REDIS_ADDR it starts a throwaway redis-server on a free loopback
// port. Every contender runs every scenario in every round, interleaved (the
// order rotates between rounds), and the report gives the median over the
// rounds. Multi-client points run each client in its own OS process (the
// bench re-executes itself with -worker).
//
// Usage (from bench/):
//
//	go run . [-quick] [-rounds 3] [-duration 1s] [-contenders rlock,spin] [-scenarios hot,many,handoff-xproc,fleet,fleet-inproc,blocked]
//	go run . -scenarios cluster   # the Redis Cluster points (cluster.go), make bench-cluster
//	go run . -scenarios names     # Redis memory per lock name (names.go), make bench-names
//	go run . -scenarios entity-new,entity-own   # uncontended per-entity locks (entity.go), make bench-entity
//
// It writes results/results.json and results/chart.png (results/cluster.json
// alone for a run of the cluster points only, results/entity.json and
// results/entity.png for a run of the entity points only), and exits 1 when a
// contender lost a counter update, let two holders overlap, left a waiter
// stuck on a free lock (unless listed in -known-stuck), or the bench failed.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

type config struct {
	quick       bool
	rounds      int
	duration    time.Duration
	manyFactor  float64
	wait        time.Duration
	stuckAfter  time.Duration
	drainLimit  time.Duration
	contenders  []string
	scenarios   []string
	hotClients  []int
	hotG        int
	manyLocks   int
	manyWaiters int
	holds       []time.Duration
	inprocHolds []time.Duration
	pings       int
	fleetProcs  int
	handoffDur  time.Duration
	blockedK    int
	blockedWin  time.Duration
	floorMsgs   int
	entityN     int
	out         string
	knownStuck  []string
	// The cluster points (cluster.go).
	clusterProcs    int
	clusterG        int
	clusterSharing  []int
	clusterHotProcs int
	clusterDur      time.Duration
}

func main() {
	for _, a := range os.Args[1:] {
		if a == "-worker" || a == "--worker" {
			os.Exit(workerMain())
		}
	}
	os.Exit(run())
}

func run() int {
	var cfg config
	var contenders, scenarios, hotClients, holds, inprocHolds, knownStuck, clusterSharing string
	var nc namesConfig
	flag.BoolVar(&cfg.quick, "quick", false, "one round of short runs (about 3 minutes); explicit flags still win")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds; every contender runs every point once per round, and the report gives medians")
	flag.DurationVar(&cfg.duration, "duration", time.Second, "how long each run starts Lock calls; waits open at the end drain")
	flag.Float64Var(&cfg.manyFactor, "many-factor", 2, "the many-locks runs last this many times -duration (10,000 goroutines take a while to get going)")
	flag.DurationVar(&cfg.wait, "wait", 30*time.Second, "bound of every Lock call")
	flag.DurationVar(&cfg.stuckAfter, "stuck-after", time.Second, "after the run, a waiter whose lock stayed free (probed every 50ms) this long while nobody took it is stuck")
	flag.DurationVar(&cfg.drainLimit, "drain-limit", 3*time.Second, "after the run, waits still open this long are cut (reported, not a failure)")
	flag.StringVar(&contenders, "contenders", "", "comma-separated contender slugs (default: all)")
	flag.StringVar(&scenarios, "scenarios", strings.Join(defaultScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ", "))
	flag.StringVar(&hotClients, "hot-clients", "1,4,16", "client counts of the hot-lock scenario, each client its own process")
	flag.IntVar(&cfg.hotG, "hot-goroutines", 64, "goroutines in all in the hot-lock scenario")
	flag.IntVar(&cfg.manyLocks, "many-locks", 1000, "locks in the many-locks scenario")
	flag.IntVar(&cfg.manyWaiters, "many-waiters", 10, "goroutines per lock in the many-locks scenario")
	flag.StringVar(&holds, "holds", "0,1ms", "critical-section lengths (besides the counter increment) of hot, many, handoff and fleet")
	flag.StringVar(&inprocHolds, "fleet-inproc-holds", "0", "critical-section lengths of fleet-inproc (hold 1ms left out by default to keep the run under 14 minutes)")
	flag.IntVar(&cfg.pings, "pings", 2000, "sequential PINGs measuring the loopback floor each round")
	flag.IntVar(&cfg.fleetProcs, "fleet-procs", 16, "fleet scenario: worker processes with one Client and one goroutine each; fleet-inproc: Clients with one goroutine each in one process")
	flag.DurationVar(&cfg.handoffDur, "handoff-duration", 1500*time.Millisecond, "length of the handoff-xproc runs (holds of 10-20ms: about 60 hand-offs a second)")
	flag.IntVar(&cfg.blockedK, "blocked-waiters", 16, "blocked scenario: waiters, each one Client with one goroutine in its own worker process")
	flag.DurationVar(&cfg.blockedWin, "blocked-window", 1500*time.Millisecond, "blocked scenario: the measurement window while every waiter is blocked, after 2s of settling (at most 5s: redsync's lock expires after 8s)")
	flag.IntVar(&cfg.entityN, "entity-n", 16, "entity-new and entity-own: goroutines of the one-process point (one Client) and processes of the many-process point (one Client and one goroutine each)")
	flag.IntVar(&cfg.floorMsgs, "floor-msgs", 200, "pub/sub floor probe: messages each round, one every 10-20ms")
	flag.IntVar(&cfg.clusterProcs, "cluster-procs", 4, "cluster-locks points: worker processes, one Client each")
	flag.IntVar(&cfg.clusterG, "cluster-goroutines", 256, "cluster-locks points: goroutines in all, spread evenly over the processes")
	flag.StringVar(&clusterSharing, "cluster-sharing", "1,2", "cluster-locks points: goroutines per lock, each in another process (at most -cluster-procs): 1 = every goroutine its own lock; goroutines/sharing distinct locks")
	flag.DurationVar(&cfg.clusterDur, "cluster-duration", 2*time.Second, "length of the cluster points' runs (longer than -duration: the machine's other load varies from one second to the next)")
	flag.IntVar(&cfg.clusterHotProcs, "cluster-hot-procs", 8, "cluster-hot points: worker processes with one Client and one goroutine each, on one lock")
	flag.IntVar(&nc.count, "names-count", 1_000_000, "names scenario: distinct names, each locked once")
	flag.IntVar(&nc.held, "names-held", 100_000, "names scenario: names held at once to measure the memory of a held name (at most -names-count)")
	flag.IntVar(&nc.concurrency, "names-concurrency", 256, "names scenario: Lock calls in flight at once")
	flag.DurationVar(&nc.lease, "names-lease", 0, "names scenario: WithLease of every hold; 0 for watchdog holds")
	flag.DurationVar(&nc.watchdog, "names-watchdog", rlock.DefaultWatchdogTimeout, "names scenario: the Client's watchdog timeout")
	flag.DurationVar(&nc.settle, "names-settle", 10*time.Second, "names scenario: how long to wait, once every key is gone, for used_memory to come back to the baseline")
	flag.StringVar(&cfg.out, "out", "results", "directory for results.json and chart.png (cluster.json alone for a run of -scenarios cluster only)")
	flag.StringVar(&knownStuck, "known-stuck", "rueidislock,rueidislock-km1", "contender slugs whose stuck waiters are reported as a known finding but do not fail the run (\"\" to fail on any)")
	flag.Bool("worker", false, "internal: serve jobs on stdin (the bench starts its workers so)")
	flag.Parse()

	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.quick {
		if !set["rounds"] {
			cfg.rounds = 1
		}
		if !set["duration"] {
			cfg.duration = 250 * time.Millisecond
		}
		if !set["drain-limit"] {
			cfg.drainLimit = 1500 * time.Millisecond
		}
		if !set["pings"] {
			cfg.pings = 500
		}
		if !set["handoff-duration"] {
			cfg.handoffDur = time.Second
		}
		if !set["blocked-window"] {
			cfg.blockedWin = time.Second
		}
		if !set["floor-msgs"] {
			cfg.floorMsgs = 100
		}
		if !set["cluster-duration"] {
			cfg.clusterDur = 500 * time.Millisecond
		}
	}
	var err error
	if cfg.contenders, err = pickContenders(contenders); err == nil {
		cfg.scenarios, err = pickScenarios(scenarios)
	}
	if err == nil {
		cfg.hotClients, err = parseInts(hotClients)
	}
	if err == nil {
		cfg.holds, err = parseDurations(holds)
	}
	if err == nil {
		cfg.inprocHolds, err = parseDurations(inprocHolds)
	}
	if err == nil {
		cfg.clusterSharing, err = parseInts(clusterSharing)
	}
	cfg.knownStuck = splitList(knownStuck)
	if err == nil && (cfg.rounds < 1 || cfg.duration <= 0 || cfg.wait <= 0 || cfg.stuckAfter <= 0 || cfg.drainLimit <= 0 ||
		cfg.manyFactor <= 0 || cfg.hotG < 1 || cfg.manyLocks < 1 || cfg.manyWaiters < 1 || cfg.pings < 1 ||
		cfg.fleetProcs < 1 || cfg.handoffDur <= 0 || cfg.blockedK < 1 || cfg.blockedWin <= 0 || cfg.floorMsgs < 1 || cfg.entityN < 1 ||
		cfg.clusterProcs < 1 || cfg.clusterHotProcs < 1 || cfg.clusterDur <= 0) {
		err = errors.New("-rounds, -duration, -many-factor, -wait, -stuck-after, -drain-limit, -hot-goroutines, -many-locks, -many-waiters, -pings, -fleet-procs, -handoff-duration, -blocked-waiters, -blocked-window, -floor-msgs, -entity-n, -cluster-procs, -cluster-hot-procs and -cluster-duration must be positive")
	}
	if err == nil && cfg.clusterG < cfg.clusterProcs {
		err = errors.New("-cluster-goroutines must be at least -cluster-procs")
	}
	if err == nil && slices.ContainsFunc(cfg.clusterSharing, func(s int) bool { return s > cfg.clusterProcs || cfg.clusterG%(cfg.clusterProcs*s) != 0 }) {
		err = errors.New("-cluster-sharing: each count s must be at most -cluster-procs, and -cluster-goroutines a multiple of -cluster-procs x s (so that the s users of a lock are in s processes)")
	}
	if err == nil && cfg.blockedWin > maxBlockedWindow {
		err = fmt.Errorf("-blocked-window must be at most %v: the hold (2s settling + the window) must end before redsync's lock expires (8s)", maxBlockedWindow)
	}
	if err == nil && cfg.stuckAfter >= cfg.drainLimit {
		err = errors.New("-stuck-after must be shorter than -drain-limit, or stuck waiters would be reported as cut")
	}
	if err == nil && slices.Contains(cfg.scenarios, "names") {
		switch {
		case len(cfg.scenarios) > 1:
			err = errors.New("-scenarios names runs alone (it measures the memory of the whole server)")
		case nc.count < 1 || nc.held < 1 || nc.held > nc.count || nc.concurrency < 1 || nc.lease < 0 || nc.settle < 0:
			err = errors.New("-names-count, -names-held and -names-concurrency must be positive, -names-held at most -names-count, -names-lease and -names-settle not negative")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.scenarios[0] == "names" {
		if err := runNames(ctx, cfg, nc); err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "bench: interrupted")
				return 130
			}
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	rep, failed, err := runBench(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "bench: interrupted")
			return 130
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	_ = rep
	if failed {
		fmt.Fprintln(os.Stderr, "bench: FAIL: a contender broke mutual exclusion or left waiters stuck (see Findings)")
		return 1
	}
	return 0
}

func runBench(ctx context.Context, cfg config) (*Report, bool, error) {
	srv, shared, err := openRedis(ctx)
	if err != nil {
		return nil, false, err
	}
	defer srv.Close()
	raw, err := newRawClient(srv.Addr(), nil)
	if err != nil {
		return nil, false, err
	}
	defer raw.Close()
	b := &bench{addr: srv.Addr(), raw: raw, pool: &workerPool{}, prefix: "relock-bench:" + rand.Text()[:8], cfg: cfg, holdSeed: mrand.Uint64()}
	defer b.pool.close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.cleanUp(cctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: clean-up:", err)
		}
	}()

	points := buildPoints(cfg)
	if err := b.openTargets(ctx, points); err != nil {
		return nil, false, err
	}
	defer func() {
		if err := b.closeTargets(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stop clusters:", err)
		}
	}()
	// The contenders, and at each point those of them that run there.
	var cs []Contender
	perPoint := make([][]Contender, len(points))
	total := 0
	for _, slug := range cfg.contenders {
		c, _ := contenderBySlug(slug)
		runs := false
		for pi, pt := range points {
			if pt.runs(c) {
				perPoint[pi] = append(perPoint[pi], c)
				runs = true
			}
		}
		if runs {
			cs = append(cs, c)
		}
	}
	for _, pc := range perPoint {
		total += len(pc)
	}
	clusterOnly := !slices.ContainsFunc(points, func(p Point) bool { return !isClusterPoint(p) })
	entityOnly := !slices.ContainsFunc(points, func(p Point) bool { return !isEntityPoint(p) })
	rep := newReport(cfg, points, cs)
	rep.Server = b.serverInfo(ctx)
	rep.Server["addr"] = srv.Addr()
	if shared {
		rep.Server["source"] = "REDIS_ADDR (shared: counts include other traffic)"
	} else {
		rep.Server["source"] = "throwaway redis-server"
	}
	rep.LoadAvg = append(rep.LoadAvg, loadAvg())
	fmt.Printf("redis %s at %s (%s); %d CPUs, %s; load average %s\n", rep.Server["redis_version"], srv.Addr(), rep.Server["source"], runtime.NumCPU(), runtime.Version(), rep.LoadAvg[0])
	rep.Module = moduleState()
	fmt.Printf("relock %s\n", rep.Module)
	fmt.Printf("%d rounds x %d points, %d runs a round, runs of %v (many-locks %v, handoff-xproc %v, blocked window %v, cluster %v; waits bounded by %v, stuck after %v free, drain limit %v)\n\n",
		cfg.rounds, len(points), total, cfg.duration, time.Duration(float64(cfg.duration)*cfg.manyFactor), cfg.handoffDur, cfg.blockedWin, cfg.clusterDur, cfg.wait, cfg.stuckAfter, cfg.drainLimit)

	total *= cfg.rounds
	n := 0
	start := time.Now()
	for round := 1; round <= cfg.rounds; round++ {
		p50, p99, err := b.pingFloor(ctx, cfg.pings)
		if err != nil {
			return nil, false, err
		}
		rep.Pings = append(rep.Pings, PingFloor{Round: round, P50: p50, P99: p99})
		// The pub/sub floors serve the hand-off points on the bench's own
		// server; a run of cluster points only compares its points with
		// each other, and the entity points have no hand-offs.
		if clusterOnly || entityOnly {
			fmt.Printf("round %d/%d: loopback floor PING p50 %s, p99 %s; load average %s\n", round, cfg.rounds, fmtMs(p50), fmtMs(p99), loadAvg())
		} else {
			fl, err := b.pubsubFloor(ctx, round, cfg.floorMsgs, false, byPublish)
			if err != nil {
				if ctx.Err() != nil {
					return nil, false, ctx.Err()
				}
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			} else {
				rep.PubSub = append(rep.PubSub, fl)
			}
			for _, by := range []floorBy{byPublish, byScript, byHandoff} {
				if tf, err := b.pubsubFloor(ctx, round, max(10, cfg.floorMsgs/8), true, by); err != nil {
					if ctx.Err() != nil {
						return nil, false, ctx.Err()
					}
					fmt.Fprintf(os.Stderr, "bench: turn floor (by %v): %v\n", by, err)
				} else {
					rep.PubSub = append(rep.PubSub, tf)
				}
			}
			fmt.Printf("round %d/%d: loopback floor PING p50 %s, p99 %s; pub/sub floor p50 %s, p99 %s (%d messages, %d lost; PUBLISH round trip p50 %s, p99 %s)\n",
				round, cfg.rounds, fmtMs(p50), fmtMs(p99), fmtMs(fl.P50), fmtMs(fl.P99), fl.Sent, fl.Lost, fmtMs(fl.PublishP50), fmtMs(fl.PublishP99))
		}
		for pi, pt := range points {
			// Rotate the order every point and round, so that no contender
			// always runs first (cold) or right after a heavy one.
			pcs := perPoint[pi]
			if len(pcs) == 0 {
				continue
			}
			k := (round - 1 + pi) % len(pcs)
			order := append(slices.Clone(pcs[k:]), pcs[:k]...)
			for _, c := range order {
				n++
				r, err := b.runPoint(ctx, pt, c, round)
				if err != nil {
					if ctx.Err() != nil {
						return nil, false, ctx.Err()
					}
					fmt.Fprintf(os.Stderr, "bench: %v\n", err)
					r = Result{Contender: c.Slug, Round: round, Errors: 1, ErrorMsg: err.Error()}
				}
				rep.add(pi, r)
				if b := r.Blocked; b != nil {
					fmt.Printf("[%3d/%d %5.0fs] %-22s %-17s %8.3f cmd + %.3f PING per blocked waiter per second  %s\n",
						n, total, time.Since(start).Seconds(), pt.Label, c.Name, b.CmdPerWaiterS, b.PingPerWaiterS, r.verdict())
					continue
				}
				bus := ""
				if r.BusCounted {
					bus = fmt.Sprintf("  bus publish %.2f + publishshard %.2f /acq", r.BusPublishPerAcq, r.BusPublishShPerAcq)
				}
				fmt.Printf("[%3d/%d %5.0fs] %-22s %-17s %8.0f acq/s  wait p99 %8s  %5.1f req/acq  %s%s\n",
					n, total, time.Since(start).Seconds(), pt.Label, c.Name, r.PerSecond, fmtMs(r.WaitP99), r.RequestsPerAcq, r.verdict(), bus)
			}
		}
	}
	rep.finish()
	rep.Elapsed = time.Since(start).Seconds()
	rep.LoadAvg = append(rep.LoadAvg, loadAvg())

	fmt.Println()
	rep.printTable(os.Stdout)
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return rep, true, err
	}
	// A run of the cluster or the entity points alone keeps the main run's
	// results.
	jsonPath, pngPath := filepath.Join(cfg.out, "results.json"), filepath.Join(cfg.out, "chart.png")
	switch {
	case clusterOnly:
		jsonPath, pngPath = filepath.Join(cfg.out, "cluster.json"), ""
	case entityOnly:
		jsonPath, pngPath = filepath.Join(cfg.out, "entity.json"), filepath.Join(cfg.out, "entity.png")
	}
	if err := rep.writeJSON(jsonPath); err != nil {
		return rep, true, err
	}
	if pngPath != "" {
		if err := rep.writeChart(pngPath); err != nil {
			return rep, true, err
		}
		fmt.Printf("\nwrote %s and %s (%.0fs; load average at the end %s)\n", jsonPath, pngPath, rep.Elapsed, loadAvg())
	} else {
		fmt.Printf("\nwrote %s (%.0fs; load average at the end %s)\n", jsonPath, rep.Elapsed, loadAvg())
	}
	failed := rep.printFindings(os.Stdout)
	return rep, failed, nil
}

// loadAvg returns the 1, 5 and 15-minute load averages of the machine
// (/proc/loadavg), the other work the figures were measured beside.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// openRedis returns the server named by REDIS_ADDR (shared is true then), or
// starts a throwaway one.
func openRedis(ctx context.Context) (srv *redistest.Server, shared bool, err error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		srv, err := redistest.Attach(ctx, addr)
		return srv, true, err
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, false, errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server) or set REDIS_ADDR=host:port")
	}
	srv, err = redistest.StartServer(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("start redis-server: %w", err)
	}
	return srv, false, nil
}

// allScenarios are the scenarios; defaultScenarios those of a run without
// -scenarios (handoff, the in-process hand-off point, is left out to keep
// the default run under 14 minutes: fleet-inproc and handoff-xproc cover
// hand-offs between Clients in one process and between processes; the
// entity points, another 6 points for every contender, have a target of
// their own, make bench-entity).
var (
	allScenarios     = []string{"hot", "many", "handoff", "handoff-xproc", "fleet", "fleet-inproc", "blocked", "entity-new", "entity-own", "cluster", "names"}
	defaultScenarios = []string{"hot", "many", "handoff-xproc", "fleet", "fleet-inproc", "blocked"}
)

// maxBlockedWindow keeps the blocked point's hold (blockedSettle + the
// window + a margin) inside redsync's 8s expiry.
const maxBlockedWindow = 5 * time.Second

// The handoff-xproc point: 4 worker processes, one Client and one goroutine
// each, holds drawn from 10-20ms: every hand-off crosses processes (with 2
// goroutines per Client, as in the in-process handoff point, most of
// rlock's hand-offs would be local passes, a few cross-process samples a
// second).
const (
	xhandoffProcs   = 4
	xhandoffPerProc = 1
	xhandoffHoldMin = 10 * time.Millisecond
	xhandoffHoldMax = 20 * time.Millisecond
)

func buildPoints(cfg config) []Point {
	var pts []Point
	for _, sc := range cfg.scenarios {
		switch sc {
		case "handoff-xproc":
			pts = append(pts, Point{Scenario: sc,
				Label:   fmt.Sprintf("handoff-xproc %dp/%dg hold %v-%v", xhandoffProcs, xhandoffProcs*xhandoffPerProc, xhandoffHoldMin, xhandoffHoldMax),
				Workers: xhandoffProcs, ClientsPerWorker: 1, Goroutines: xhandoffProcs * xhandoffPerProc, Locks: 1,
				Hold: xhandoffHoldMin, HoldMax: xhandoffHoldMax, Duration: cfg.handoffDur})
			continue
		case "blocked":
			pts = append(pts, Point{Scenario: sc, Label: fmt.Sprintf("blocked %dp/%dg %v", cfg.blockedK, cfg.blockedK, cfg.blockedWin),
				Workers: cfg.blockedK, ClientsPerWorker: 1, Goroutines: cfg.blockedK, Locks: 1, Window: cfg.blockedWin})
			continue
		case "cluster":
			pts = append(pts, clusterPoints(cfg)...)
			continue
		case "entity-new", "entity-own":
			pts = append(pts, entityPoints(sc, cfg.entityN)...)
			continue
		}
		holds := cfg.holds
		if sc == "fleet-inproc" {
			holds = cfg.inprocHolds
		}
		for _, hold := range holds {
			h := "hold " + fmtHold(hold)
			switch sc {
			case "hot":
				for _, c := range cfg.hotClients {
					pts = append(pts, Point{Scenario: "hot", Label: fmt.Sprintf("hot %dc/%dg %s", c, cfg.hotG, h),
						Workers: c, ClientsPerWorker: 1, Goroutines: cfg.hotG / c * c, Locks: 1, Hold: hold})
				}
			case "many":
				pts = append(pts, Point{Scenario: "many", Label: fmt.Sprintf("many %dx%d %s", cfg.manyLocks, cfg.manyWaiters, h),
					Workers: 1, ClientsPerWorker: 1, Goroutines: cfg.manyLocks * cfg.manyWaiters, Locks: cfg.manyLocks, Hold: hold,
					Duration: time.Duration(float64(cfg.duration) * cfg.manyFactor)})
			case "handoff":
				pts = append(pts, Point{Scenario: "handoff", Label: "handoff 4c/8g " + h,
					Workers: 1, ClientsPerWorker: 4, Goroutines: 8, Locks: 1, Hold: hold})
			case "fleet":
				n := cfg.fleetProcs
				pts = append(pts, Point{Scenario: sc, Label: fmt.Sprintf("fleet %dp/%dg %s", n, n, h),
					Workers: n, ClientsPerWorker: 1, Goroutines: n, Locks: 1, Hold: hold})
			case "fleet-inproc":
				n := cfg.fleetProcs
				pts = append(pts, Point{Scenario: sc, Label: fmt.Sprintf("fleet-inproc %dc/%dg %s", n, n, h),
					Workers: 1, ClientsPerWorker: n, Goroutines: n, Locks: 1, Hold: hold})
			}
		}
	}
	return pts
}

func fmtHold(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

func pickContenders(list string) ([]string, error) {
	if list == "" {
		var all []string
		for _, c := range registry {
			if !c.OnRequest {
				all = append(all, c.Slug)
			}
		}
		return all, nil
	}
	out := splitList(list)
	for _, s := range out {
		if _, ok := contenderBySlug(s); !ok {
			var all []string
			for _, c := range registry {
				all = append(all, c.Slug)
			}
			return nil, fmt.Errorf("unknown contender %q (have: %s)", s, strings.Join(all, ", "))
		}
	}
	return out, nil
}

func pickScenarios(list string) ([]string, error) {
	out := splitList(list)
	for _, s := range out {
		if !slices.Contains(allScenarios, s) {
			return nil, fmt.Errorf("unknown scenario %q (have: %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bad duration %q", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// moduleState describes the relock tree the bench was built from: the
// commit of the parent directory and whether it had uncommitted changes.
func moduleState() string {
	out, err := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(commit unknown)"
	}
	s := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		s += " + uncommitted changes"
	}
	return s
}
