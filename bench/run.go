package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
)

// bench is the parent's state: the Redis under test, the raw client that
// reads its statistics, and the worker processes.
type bench struct {
	addr   string
	raw    rueidis.Client // uncounted: INFO, counters, PING, clean-up
	pool   *workerPool
	prefix string // of every key of this bench run
	cfg    config
	seq    int
	// targets are the Redis servers points run on, by Point.Target: the
	// bench's own (addr, raw) under "", and the clusters it started.
	targets map[string]*target
	// holdSeed, plus the round, seeds the drawn holds of every contender
	// of a round alike (see holdFor).
	holdSeed uint64
}

// newRawClient returns an uncounted client for the bench's own commands
// (INFO, probes, PING floor, clean-up) that sends no keep-alive PINGs: rueidis
// PINGs a connection idle for Dialer.KeepAlive (1s by default), and the
// bench's idle connections would add their PINGs to the server-side counts of
// every run (one per worker process per second) and to the blocked point's.
// With cluster (the masters of a Redis Cluster) it is a cluster client.
func newRawClient(addr string, cluster []string) (rueidis.Client, error) {
	opt := rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, ClientName: benchClientName}
	if len(cluster) > 0 {
		opt.InitAddress, opt.ForceSingleClient = cluster, false
	}
	opt.Dialer.KeepAlive = -1 // no background PING (and no TCP keep-alive: loopback)
	return rueidis.NewClient(opt)
}

// benchClientName names the bench's own connections (CLIENT SETNAME), so
// that connection counts can leave them out.
const benchClientName = "relock-bench"

// contenderConns counts the server's connections that are not the bench's
// own (CLIENT LIST).
func (b *bench) contenderConns(ctx context.Context) (int, error) {
	text, err := b.raw.Do(ctx, b.raw.B().ClientList().Build()).ToString()
	if err != nil {
		return 0, fmt.Errorf("CLIENT LIST: %w", err)
	}
	n := 0
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) != "" && !strings.Contains(line, " name="+benchClientName+" ") {
			n++
		}
	}
	return n, nil
}

// snapshot is INFO commandstats and cpu at one moment, summed over the
// nodes of a target (one for a standalone server), and on a cluster the
// publish messages its nodes sent over the cluster bus.
type snapshot struct {
	commands map[string]int64
	cpu      float64   // seconds, all nodes
	nodeCPU  []float64 // seconds, node by node
	bus      map[string]int64
	at       int64 // mono, when taken
}

func (b *bench) info(ctx context.Context, sections ...string) (string, error) {
	return b.raw.Do(ctx, b.raw.B().Info().Section(sections...).Build()).ToString()
}

// snapshot reads the bench's own server.
func (b *bench) snapshot(ctx context.Context) (snapshot, error) {
	return b.targets[""].snapshot(ctx)
}

// addInfo adds one node's INFO commandstats and cpu text to s.
func (s *snapshot) addInfo(text string) error {
	cpu := 0.0
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			for field := range strings.SplitSeq(fields, ",") {
				if v, ok := strings.CutPrefix(field, "calls="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return fmt.Errorf("INFO commandstats line %q: %w", line, err)
					}
					s.commands[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] += n
				}
			}
		case name == "used_cpu_user" || name == "used_cpu_sys":
			v, err := strconv.ParseFloat(fields, 64)
			if err != nil {
				return fmt.Errorf("INFO cpu line %q: %w", line, err)
			}
			cpu += v
		}
	}
	s.cpu += cpu
	s.nodeCPU = append(s.nodeCPU, cpu)
	return nil
}

func delta(before, after snapshot) serverDelta {
	d := serverDelta{commands: map[string]int64{}, cpu: after.cpu - before.cpu, bus: map[string]int64{}, counted: after.bus != nil}
	for name, n := range after.commands {
		if x := n - before.commands[name]; x > 0 {
			d.commands[name] = x
		}
	}
	for name, n := range after.bus {
		d.bus[name] = n - before.bus[name]
	}
	if wall := float64(after.at-before.at) / 1e9; wall > 0 && len(before.nodeCPU) == len(after.nodeCPU) {
		for i := range after.nodeCPU {
			d.busiestCPU = max(d.busiestCPU, (after.nodeCPU[i]-before.nodeCPU[i])/wall)
		}
	}
	return d
}

// serverInfo returns a few facts about the server for the report.
func (b *bench) serverInfo(ctx context.Context) map[string]string {
	text, err := b.info(ctx, "server")
	out := map[string]string{}
	if err != nil {
		return out
	}
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "redis_version" || k == "os" || k == "arch_bits" || k == "io_threads_active") {
			out[k] = v
		}
	}
	return out
}

// runPoint runs contender c at point pt: it hands the jobs to the workers,
// starts them together, and aggregates what they and Redis report.
func (b *bench) runPoint(ctx context.Context, pt Point, c Contender, round int) (Result, error) {
	if pt.Scenario == "blocked" {
		return b.runBlocked(ctx, pt, c, round)
	}
	tg := b.targets[pt.Target]
	if tg == nil {
		return Result{}, fmt.Errorf("%s: target %q not started", pt.Label, pt.Target)
	}
	began := time.Now()
	b.seq++
	prefix := fmt.Sprintf("%s:%d:%s", b.prefix, b.seq, c.Slug)
	ws, err := b.pool.get(pt.Workers)
	if err != nil {
		return Result{}, err
	}
	fail := func(err error) (Result, error) {
		b.pool.discard(ws) // their state is unknown: start afresh next time
		return Result{}, fmt.Errorf("%s at %s: %w", c.Slug, pt.Label, err)
	}
	counterFile, err := newCounterFile(pt.Locks)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(counterFile)
	perWorker := pt.Goroutines / pt.Workers
	duration := b.cfg.duration
	if pt.Duration > 0 {
		duration = pt.Duration
	}
	for i, w := range ws {
		job := Job{
			Contender:  c.Slug,
			Addr:       tg.addr,
			Cluster:    tg.seeds,
			Prefix:     prefix,
			Worker:     i,
			Clients:    pt.ClientsPerWorker,
			Goroutines: perWorker,
			FirstG:     i * perWorker,
			Locks:      pt.Locks,
			Hold:       pt.Hold,
			HoldMax:    pt.HoldMax,
			HoldSeed:   b.holdSeed + uint64(round),
			FreshNames: pt.FreshNames,
			Counters:   counterFile,
			Duration:   duration,
			Wait:       b.cfg.wait,
			StuckAfter: b.cfg.stuckAfter,
			DrainLimit: b.cfg.drainLimit,
		}
		if err := w.send(toWorker{Cmd: "job", Job: &job}); err != nil {
			return fail(err)
		}
	}
	if err := recvAll(ctx, ws, "ready", time.Minute); err != nil {
		return fail(err)
	}
	before, err := tg.snapshot(ctx)
	if err != nil {
		return fail(err)
	}
	for _, w := range ws {
		if err := w.send(toWorker{Cmd: "go"}); err != nil {
			return fail(err)
		}
	}
	results := make([]WorkerResult, len(ws))
	var mu sync.Mutex
	err = recvEach(ctx, ws, "result", duration+b.cfg.drainLimit+time.Minute, func(i int, m fromWorker) {
		mu.Lock()
		results[i] = *m.Result
		mu.Unlock()
	})
	if err != nil {
		return fail(err)
	}
	after, err := tg.snapshot(ctx)
	if err != nil {
		return fail(err)
	}
	for _, w := range ws {
		if err := w.send(toWorker{Cmd: "close"}); err != nil {
			return fail(err)
		}
	}
	if err := recvAll(ctx, ws, "closed", time.Minute); err != nil {
		return fail(err)
	}
	counters, err := readCounterFile(counterFile, pt.Locks)
	if err != nil {
		return fail(err)
	}
	if pt.FreshNames {
		// Tens of thousands of names per run: what outlives a release
		// (rlock's fencing counters, for 30s) would expire during the
		// next contender's run and count as its Redis CPU. The deletion
		// comes after the second snapshot, so no run pays for it.
		if err := b.unlinkMatching(ctx, prefix+":*"); err != nil {
			return fail(fmt.Errorf("delete the run's keys: %w", err))
		}
	}
	r := aggregate(pt, c.Slug, results, delta(before, after), counters)
	r.Round = round
	r.Seconds = time.Since(began).Seconds()
	return r, nil
}

func recvAll(ctx context.Context, ws []*workerProc, want string, timeout time.Duration) error {
	return recvEach(ctx, ws, want, timeout, func(int, fromWorker) {})
}

// recvEach waits for message want from every worker, in parallel.
func recvEach(ctx context.Context, ws []*workerProc, want string, timeout time.Duration, fn func(int, fromWorker)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			m, err := w.recv(ctx, want)
			if err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", i, err)
				return
			}
			fn(i, m)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pingFloor measures n sequential PING round trips on the raw client: the
// loopback floor under every other figure.
func (b *bench) pingFloor(ctx context.Context, n int) (p50, p99 float64, err error) {
	rtts := make([]int64, 0, n)
	for range n {
		t0 := mono()
		if err := b.raw.Do(ctx, b.raw.B().Ping().Build()).Error(); err != nil {
			return 0, 0, fmt.Errorf("PING: %w", err)
		}
		rtts = append(rtts, mono()-t0)
	}
	slices.Sort(rtts)
	return ms(measure.Percentile(rtts, 0.5)), ms(measure.Percentile(rtts, 0.99)), nil
}

// cleanUp deletes the keys of this bench run, which matters on a shared
// server (REDIS_ADDR): fencing counters and latches outlive their locks.
func (b *bench) cleanUp(ctx context.Context) error { return b.unlinkMatching(ctx, b.prefix+":*") }

// unlinkMatching deletes the keys of the bench's own server that match the
// pattern.
func (b *bench) unlinkMatching(ctx context.Context, match string) error {
	var cursor uint64
	for {
		e, err := b.raw.Do(ctx, b.raw.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		if len(e.Elements) > 0 {
			if err := b.raw.Do(ctx, b.raw.B().Unlink().Key(e.Elements...).Build()).Error(); err != nil {
				return err
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}
