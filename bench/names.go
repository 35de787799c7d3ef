package main

// The names scenario: Redis memory per lock name. A service that locks
// "orders:<id>" touches each name once or a few times; what matters then is
// what a name costs in Redis while it is held and after, and that an idle
// name costs nothing once its idle bound has passed. It locks -names-count
// distinct names once each, many at a time, on the bench's own throwaway
// server (used_memory counts the whole server, so a shared one would measure
// its other users too), and reports:
//
//   - used_memory before any lock (the client connected, its scripts loaded);
//   - per name while held: -names-held names held at once;
//   - per name just after Unlock, before the idle bound (the fencing counter
//     and a release's retry latch remain);
//   - how long after the last lock every key was gone, and used_memory then.
//
// Redis's clock cannot be sped up, so the run waits the idle bound out: with
// watchdog holds (-names-lease 0, the default) the fencing counter is kept one
// watchdog timeout (-names-watchdog, 30s by default as in rlock) past the
// name's last token.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/rlock"
)

type namesConfig struct {
	count       int
	held        int
	concurrency int
	lease       time.Duration // 0: watchdog holds
	watchdog    time.Duration
	settle      time.Duration // how long used_memory may take to come back once the keys are gone
}

// NamesReport is results/names.json.
type NamesReport struct {
	Module      string            `json:"module"`
	Server      map[string]string `json:"server"`
	CPUs        int               `json:"cpus"`
	GoVersion   string            `json:"go_version"`
	LoadAvg     []string          `json:"load_avg"`
	Names       int               `json:"names"`
	HeldAtOnce  int               `json:"held_at_once"`
	Concurrency int               `json:"concurrency"`
	Holds       string            `json:"holds"` // "watchdog 30s" or "WithLease(...)"
	// IdleBound is what the README states for this configuration: the
	// fencing counter is kept max(lease, 1s) past a name's last token, a
	// release's latch the unlock timeout + 1s.
	IdleBound string `json:"idle_bound"`

	BaselineBytes int64   `json:"baseline_used_memory"`
	HeldBytes     int64   `json:"held_used_memory"`
	HeldKeys      int64   `json:"held_keys"`
	IdleBytes     int64   `json:"idle_used_memory"` // the held sample just released
	IdleKeys      int64   `json:"idle_keys"`
	PeakBytes     int64   `json:"peak_used_memory"` // every name locked once, before the idle bound
	PeakKeys      int64   `json:"peak_keys"`
	AfterBytes    int64   `json:"after_used_memory"`
	AfterKeys     int64   `json:"after_keys"`
	PerHeldName   float64 `json:"bytes_per_held_name"`
	PerIdleName   float64 `json:"bytes_per_idle_name_before_bound"`
	// SpinPerHeldName is the same sample held by the bench's spin lock (SET
	// NX PX of a token, on the key an rlock.Mutex of that name holds), on
	// the same server just before; HeldRatioToSpin is PerHeldName over it.
	SpinPerHeldName float64 `json:"spin_bytes_per_held_name"`
	HeldRatioToSpin float64 `json:"held_ratio_to_spin"`
	LockUnlockPerS  float64 `json:"lock_unlock_per_s"`
	// KeysGoneAfter is the time from the last Lock call's return to the
	// first DBSIZE of 0 (polled every 250ms); MemoryBackAfter from then to
	// used_memory within 1% of the baseline (or the settle limit).
	KeysGoneAfter   string  `json:"keys_gone_after_last_lock"`
	MemoryBackAfter string  `json:"memory_back_after_keys_gone"`
	AfterVsBaseline float64 `json:"after_minus_baseline_bytes"`
	// AfterVsBaselineByPart is where that difference lies, by MEMORY STATS
	// field (those that moved by 1 KiB or more); clients.normal is the
	// buffers of the connections, which the run's pipelining grew.
	AfterVsBaselineByPart map[string]int64 `json:"after_minus_baseline_by_part"`
	// AfterVsBaselineKeys is the difference less the connections' buffers.
	AfterVsBaselineKeys float64 `json:"after_minus_baseline_less_client_buffers"`
	Elapsed             float64 `json:"elapsed_s"`
}

func runNames(ctx context.Context, cfg config, nc namesConfig) error {
	if os.Getenv("REDIS_ADDR") != "" {
		return errors.New("-scenarios names measures used_memory of the whole server: run it on the throwaway server (unset REDIS_ADDR)")
	}
	start := time.Now()
	srv, _, err := openRedis(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	raw, err := newRawClient(srv.Addr(), nil)
	if err != nil {
		return err
	}
	defer raw.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	r := &namesRun{ctx: ctx, nc: nc, b: &bench{addr: srv.Addr(), raw: raw}, raw: raw, rc: rc, prefix: "relock-bench-names"}
	if r.c, err = rlock.New(rc, rlock.WithKeyPrefix(r.prefix), rlock.WithWatchdogTimeout(nc.watchdog)); err != nil {
		return err
	}
	defer r.c.Close()
	r.describe(srv.Addr())
	for _, step := range []func() error{r.baseline, r.heldSample, r.lockEachOnce, r.waitIdle, r.memoryBack} {
		if err := step(); err != nil {
			return err
		}
	}
	r.rep.LoadAvg = append(r.rep.LoadAvg, loadAvg())
	r.rep.Elapsed = time.Since(start).Seconds()
	return writeNamesReport(cfg.out, r.rep)
}

// namesRun is one run of the names scenario, its steps run in turn by
// runNames, each filling in its part of rep.
type namesRun struct {
	ctx       context.Context
	nc        namesConfig
	b         *bench
	raw, rc   rueidis.Client
	c         *rlock.Client
	prefix    string
	lockOpts  []rlock.LockOption
	keep      time.Duration    // how long a name's fencing counter is kept
	rep       *NamesReport     // what the run measured
	baseParts map[string]int64 // MEMORY STATS at the baseline
	last      time.Time        // when the last Lock returned
}

func (r *namesRun) name(i int) string { return "orders:" + strconv.Itoa(i) }

// describe sets up the report and the lock options, and prints what runs.
func (r *namesRun) describe(addr string) {
	nc := r.nc
	holds := fmt.Sprintf("watchdog (timeout %v)", nc.watchdog)
	r.keep = nc.watchdog
	if nc.lease > 0 {
		r.lockOpts = append(r.lockOpts, rlock.WithLease(nc.lease))
		holds = fmt.Sprintf("WithLease(%v), watchdog timeout %v", nc.lease, nc.watchdog)
		r.keep = nc.lease
	}
	r.keep = max(r.keep, time.Second)
	r.rep = &NamesReport{
		Module: moduleState(), Server: r.b.serverInfo(r.ctx), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		LoadAvg: []string{loadAvg()}, Names: nc.count, HeldAtOnce: nc.held, Concurrency: nc.concurrency, Holds: holds,
		IdleBound: fmt.Sprintf("fencing counter %v after its last token; latch %v after the release", r.keep, rlock.DefaultUnlockTimeout+time.Second),
	}
	fmt.Printf("names: %d names, %d held at once, %d at a time, %s; redis %s at %s; relock %s; load average %s\n",
		nc.count, nc.held, nc.concurrency, holds, r.rep.Server["redis_version"], addr, r.rep.Module, r.rep.LoadAvg[0])
}

// memory returns the server's used_memory and its number of keys.
func (r *namesRun) memory() (int64, int64, error) {
	text, err := r.b.info(r.ctx, "memory")
	if err != nil {
		return 0, 0, err
	}
	var used int64 = -1
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if used < 0 {
		return 0, 0, errors.New("INFO memory has no used_memory")
	}
	keys, err := r.raw.Do(r.ctx, r.raw.B().Dbsize().Build()).AsInt64()
	return used, keys, err
}

// slowlogReset empties the slow log, which keeps the arguments of up to 128
// slow commands (on a loaded machine, some scripts): memory of the server,
// not of any lock.
func (r *namesRun) slowlogReset() error {
	return r.raw.Do(r.ctx, r.raw.B().SlowlogReset().Build()).Error()
}

// forEach runs fn for names [from, to), nc.concurrency at a time.
func (r *namesRun) forEach(from, to int, fn func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, r.nc.concurrency)
	for range r.nc.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to || r.ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("%s: %w", r.name(i), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return r.ctx.Err()
}

// baseline loads the scripts and opens the connections, forgets the keys,
// and measures the server without any lock.
func (r *namesRun) baseline() error {
	l, err := r.c.Mutex("warm-up").Lock(r.ctx)
	if err == nil {
		err = r.c.Mutex("warm-up").Unlock(l)
	}
	if err != nil {
		return err
	}
	if err := r.raw.Do(r.ctx, r.raw.B().Flushall().Build()).Error(); err != nil {
		return err
	}
	if err := r.slowlogReset(); err != nil {
		return err
	}
	if r.rep.BaselineBytes, _, err = r.memory(); err != nil {
		return err
	}
	if r.baseParts, err = memoryStats(r.ctx, r.raw); err != nil {
		return err
	}
	fmt.Printf("baseline: used_memory %s\n", fmtBytes(r.rep.BaselineBytes))
	return nil
}

// heldSample measures nc.held names held at once: first by the spin lock on
// the keys the Mutexes will hold (for the ratio), then by the Mutexes, and
// just after their release.
func (r *namesRun) heldSample() error {
	rep, nc := r.rep, r.nc
	spinBytes, err := spinHeldBytes(r.ctx, r.rc, r.keep, nc.held, func(i int) string { return r.prefix + ":{" + r.name(i) + "}" }, r.forEach, r.memory)
	if err != nil {
		return err
	}
	rep.SpinPerHeldName = float64(spinBytes-rep.BaselineBytes) / float64(nc.held)
	fmt.Printf("%d names held by the spin lock: %.0f bytes per held name\n", nc.held, rep.SpinPerHeldName)

	held := make([]context.Context, nc.held)
	if err := r.forEach(0, nc.held, func(i int) error {
		l, err := r.c.Mutex(r.name(i)).Lock(r.ctx, r.lockOpts...)
		held[i] = l
		return err
	}); err != nil {
		return err
	}
	if rep.HeldBytes, rep.HeldKeys, err = r.memory(); err != nil {
		return err
	}
	rep.PerHeldName = float64(rep.HeldBytes-rep.BaselineBytes) / float64(nc.held)
	fmt.Printf("%d names held: used_memory %s, %d keys: %.0f bytes and %.2f keys per held name\n",
		nc.held, fmtBytes(rep.HeldBytes), rep.HeldKeys, rep.PerHeldName, float64(rep.HeldKeys)/float64(nc.held))
	rep.HeldRatioToSpin = rep.PerHeldName / rep.SpinPerHeldName
	fmt.Printf("held name, rlock against the spin lock: %.2fx\n", rep.HeldRatioToSpin)
	if err := r.forEach(0, nc.held, func(i int) error { return r.c.Mutex(r.name(i)).Unlock(held[i]) }); err != nil {
		return err
	}
	if rep.IdleBytes, rep.IdleKeys, err = r.memory(); err != nil {
		return err
	}
	rep.PerIdleName = float64(rep.IdleBytes-rep.BaselineBytes) / float64(nc.held)
	fmt.Printf("released: used_memory %s, %d keys: %.0f bytes and %.2f keys per idle name until its idle bound\n",
		fmtBytes(rep.IdleBytes), rep.IdleKeys, rep.PerIdleName, float64(rep.IdleKeys)/float64(nc.held))
	return nil
}

// lockEachOnce locks and unlocks the other names once each.
func (r *namesRun) lockEachOnce() error {
	rep, nc := r.rep, r.nc
	began := time.Now()
	var lastLock atomic.Int64
	if err := r.forEach(nc.held, nc.count, func(i int) error {
		l, err := r.c.Mutex(r.name(i)).Lock(r.ctx, r.lockOpts...)
		if err != nil {
			return err
		}
		lastLock.Store(time.Now().UnixNano())
		return r.c.Mutex(r.name(i)).Unlock(l)
	}); err != nil {
		return err
	}
	if rest := nc.count - nc.held; rest > 0 {
		rep.LockUnlockPerS = float64(rest) / time.Since(began).Seconds()
	}
	r.last = time.Unix(0, lastLock.Load())
	var err error
	if rep.PeakBytes, rep.PeakKeys, err = r.memory(); err != nil {
		return err
	}
	fmt.Printf("%d names locked once each (%.0f Lock+Unlock/s): used_memory %s, %d keys\n",
		nc.count, rep.LockUnlockPerS, fmtBytes(rep.PeakBytes), rep.PeakKeys)
	return nil
}

// waitIdle waits the idle bound out: until every key is gone.
func (r *namesRun) waitIdle() error {
	limit := r.keep + rlock.DefaultUnlockTimeout + 2*time.Minute
	fmt.Printf("waiting for every key to expire (bound %s; giving up after %v)...\n", r.rep.IdleBound, limit)
	var keys int64
	err := r.poll(func() (bool, error) {
		var err error
		_, keys, err = r.memory()
		return keys == 0 || time.Since(r.last) > limit, err
	})
	if err != nil {
		return err
	}
	gone := time.Since(r.last)
	if keys != 0 {
		return fmt.Errorf("%d keys still there %v after the last lock", keys, gone.Round(time.Second))
	}
	r.rep.KeysGoneAfter = gone.Round(100 * time.Millisecond).String()
	return nil
}

// memoryBack waits for used_memory to come back to the baseline (Redis
// shrinks its key tables in its cron, a little after the keys go), and
// says where any difference lies.
func (r *namesRun) memoryBack() error {
	rep := r.rep
	back := time.Now()
	err := r.poll(func() (bool, error) {
		if err := r.slowlogReset(); err != nil {
			return false, err
		}
		var err error
		rep.AfterBytes, rep.AfterKeys, err = r.memory()
		return float64(rep.AfterBytes) <= 1.01*float64(rep.BaselineBytes) || time.Since(back) > r.nc.settle, err
	})
	if err != nil {
		return err
	}
	rep.MemoryBackAfter = time.Since(back).Round(100 * time.Millisecond).String()
	rep.AfterVsBaseline = float64(rep.AfterBytes - rep.BaselineBytes)
	afterParts, err := memoryStats(r.ctx, r.raw)
	if err != nil {
		return err
	}
	rep.AfterVsBaselineByPart = map[string]int64{}
	var parts []string
	for k, v := range afterParts {
		if d := v - r.baseParts[k]; d >= 1024 || d <= -1024 {
			rep.AfterVsBaselineByPart[k] = d
			parts = append(parts, fmt.Sprintf("%s %+d", k, d))
		}
	}
	slices.Sort(parts)
	rep.AfterVsBaselineKeys = rep.AfterVsBaseline - float64(afterParts["clients.normal"]-r.baseParts["clients.normal"])
	fmt.Printf("every key gone %s after the last lock; %s later used_memory %s, %+.0f bytes against the baseline (%s), %+.0f less the connections' buffers; by MEMORY STATS field: %s\n",
		rep.KeysGoneAfter, rep.MemoryBackAfter, fmtBytes(rep.AfterBytes), rep.AfterVsBaseline, fmtBytes(rep.BaselineBytes), rep.AfterVsBaselineKeys, strings.Join(parts, ", "))
	return nil
}

// poll calls done every 250ms, at once first, until it reports true or an
// error, or ctx ends.
func (r *namesRun) poll(done func() (bool, error)) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-tick.C:
		}
	}
}

// writeNamesReport writes rep to dir/names.json.
func writeNamesReport(dir string, rep *NamesReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "names.json")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%.0fs; load average at the end %s)\n", path, rep.Elapsed, rep.LoadAvg[1])
	return nil
}

// memoryStats returns the integer fields of MEMORY STATS, those of a
// database under "db.N.".
func memoryStats(ctx context.Context, raw rueidis.Client) (map[string]int64, error) {
	out := map[string]int64{}
	var walk func(prefix string, arr []rueidis.RedisMessage)
	walk = func(prefix string, arr []rueidis.RedisMessage) {
		for i := 0; i+1 < len(arr); i += 2 {
			k, err := arr[i].ToString()
			if err != nil {
				continue
			}
			if n, err := arr[i+1].AsInt64(); err == nil {
				out[prefix+k] = n
			} else if sub, err := arr[i+1].ToArray(); err == nil {
				walk(prefix+k+".", sub)
			} else if m, err := arr[i+1].ToMap(); err == nil {
				for mk, mv := range m {
					if n, err := mv.AsInt64(); err == nil {
						out[prefix+k+"."+mk] = n
					}
				}
			}
		}
	}
	res := raw.Do(ctx, raw.B().MemoryStats().Build())
	if arr, err := res.ToArray(); err == nil {
		walk("", arr)
		return out, nil
	}
	m, err := res.ToMap()
	if err != nil {
		return nil, fmt.Errorf("MEMORY STATS: %w", err)
	}
	for k, v := range m {
		if n, err := v.AsInt64(); err == nil {
			out[k] = n
		} else if sub, err := v.ToArray(); err == nil {
			walk(k+".", sub)
		} else if sm, err := v.ToMap(); err == nil {
			for mk, mv := range sm {
				if n, err := mv.AsInt64(); err == nil {
					out[k+"."+mk] = n
				}
			}
		}
	}
	return out, nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// spinHeldBytes holds n keys (key(i)) with the bench's spin lock, n-way
// through forEach, reads used_memory with memory, and releases them all by
// their compare-and-delete; it returns the reading.
func spinHeldBytes(ctx context.Context, rc rueidis.Client, lease time.Duration, n int, key func(int) string,
	forEach func(from, to int, fn func(int) error) error, memory func() (int64, int64, error)) (int64, error) {
	spin := measure.NewSpinLocker(rc, rand.Text()[:12], lease)
	unlocks := make([]func(context.Context) error, n)
	if err := forEach(0, n, func(i int) error {
		unlock, err := spin.Lock(ctx, key(i))
		unlocks[i] = unlock
		return err
	}); err != nil {
		return 0, err
	}
	used, _, err := memory()
	if err != nil {
		return 0, err
	}
	return used, forEach(0, n, func(i int) error { return unlocks[i](ctx) })
}
