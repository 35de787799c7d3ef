package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/internal/redistest"
)

// pointResult is a point's medians, contender by contender.
type pointResult struct {
	Point      string         `json:"point"`
	Title      string         `json:"title"`
	Contenders []contenderRes `json:"contenders"`
}

// contenderRes is one contender's figures at a point: medians over the
// rounds, except Violations and Errors (summed).
type contenderRes struct {
	Slug        string    `json:"slug"`
	Name        string    `json:"name"`
	Config      string    `json:"config"`
	Own         bool      `json:"own_baseline,omitempty"`
	OpsPerSec   float64   `json:"ops_per_sec"`
	ReadP50     float64   `json:"read_wait_p50_ms,omitempty"`
	ReadP99     float64   `json:"read_wait_p99_ms,omitempty"`
	WriteP50    float64   `json:"write_wait_p50_ms"` // every exclusive acquisition
	WriteP99    float64   `json:"write_wait_p99_ms"`
	WriteMax    float64   `json:"write_wait_max_ms"`
	CmdsPerOp   float64   `json:"commands_per_op"`
	Jain        float64   `json:"jain"`
	Violations  int       `json:"violations"`
	Errors      int       `json:"errors"`
	ErrorSample string    `json:"error_sample,omitempty"`
	Rounds      []roundFr `json:"rounds"`
}

// roundFr is one run.
type roundFr struct {
	Ops       int     `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	ReadP50   float64 `json:"read_wait_p50_ms"`
	ReadP99   float64 `json:"read_wait_p99_ms"`
	WriteP50  float64 `json:"write_wait_p50_ms"`
	WriteP99  float64 `json:"write_wait_p99_ms"`
	WriteMax  float64 `json:"write_wait_max_ms"`
	Commands  int64   `json:"commands"`
	Jain      float64 `json:"jain"`
}

func runPoint(ctx context.Context, s settings, pt point, servers []*redistest.Server) (pointResult, error) {
	addrs := make([]string, len(servers))
	for i, srv := range servers {
		addrs[i] = srv.Addr()
	}
	res := pointResult{Point: pt.name, Title: pt.title}
	for _, ct := range pt.contenders {
		res.Contenders = append(res.Contenders, contenderRes{Slug: ct.slug, Name: ct.name, Config: ct.config, Own: ct.own})
	}
	seq := 0
	for round := range s.rounds {
		for k := range pt.contenders {
			i := (k + round) % len(pt.contenders) // rotate the order between rounds
			ct := pt.contenders[i]
			seq++
			fr, viol, errs, sample, err := runOnce(ctx, s, pt, ct, addrs, fmt.Sprintf("kinds%d:%s:%d", time.Now().UnixNano()%1e6, pt.name, seq))
			if err != nil {
				return res, fmt.Errorf("%s: %w", ct.slug, err)
			}
			cr := &res.Contenders[i]
			cr.Rounds = append(cr.Rounds, fr)
			cr.Violations += viol
			cr.Errors += errs
			if cr.ErrorSample == "" {
				cr.ErrorSample = sample
			}
			fmt.Printf("  %-6s round %d %-22s %7.0f ops/s  violations %d  errors %d\n", pt.name, round+1, ct.name, fr.OpsPerSec, viol, errs)
		}
	}
	for i := range res.Contenders {
		cr := &res.Contenders[i]
		med := func(f func(roundFr) float64) float64 {
			xs := make([]float64, len(cr.Rounds))
			for j, r := range cr.Rounds {
				xs[j] = f(r)
			}
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		cr.OpsPerSec = med(func(r roundFr) float64 { return r.OpsPerSec })
		cr.ReadP50 = med(func(r roundFr) float64 { return r.ReadP50 })
		cr.ReadP99 = med(func(r roundFr) float64 { return r.ReadP99 })
		cr.WriteP50 = med(func(r roundFr) float64 { return r.WriteP50 })
		cr.WriteP99 = med(func(r roundFr) float64 { return r.WriteP99 })
		cr.WriteMax = med(func(r roundFr) float64 { return r.WriteMax })
		cr.Jain = med(func(r roundFr) float64 { return r.Jain })
		cr.CmdsPerOp = med(func(r roundFr) float64 {
			if r.Ops == 0 {
				return 0
			}
			return float64(r.Commands) / float64(r.Ops)
		})
	}
	return res, nil
}

// guard is the in-process check of one lock: readers and writers inside.
type guard struct {
	readers atomic.Int32
	writers atomic.Int32
}

// runOnce runs one contender at one point for s.duration, plus the drain.
func runOnce(ctx context.Context, s settings, pt point, ct contender, addrs []string, runID string) (fr roundFr, violations, errs int, sample string, err error) {
	names := make([]string, max(multiPool, 1))
	for i := range names {
		names[i] = runID + ":L" + strconv.Itoa(i)
	}
	clients := make([]client, 0, pt.clients)
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for range pt.clients {
		c, err := ct.open(ctx, addrs)
		if err != nil {
			return fr, 0, 0, "", err
		}
		clients = append(clients, c)
	}
	before, err := commandCount(ctx, addrs)
	if err != nil {
		return fr, 0, 0, "", err
	}
	guards := make([]guard, len(names))
	var viol, nerr atomic.Int64
	var mu sync.Mutex
	var reads, writes []time.Duration
	perG := make([]int64, pt.clients*pt.perC)
	deadline := time.Now().Add(s.duration)
	var wg sync.WaitGroup
	for ci, c := range clients {
		for g := range pt.perC {
			gi := ci*pt.perC + g
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(gi)+1, uint64(time.Now().UnixNano())))
				var myReads, myWrites []time.Duration
				for time.Now().Before(deadline) {
					o := pt.next(r)
					set := make([]string, len(o.locks))
					for i, l := range o.locks {
						set[i] = names[l]
					}
					callCtx, cancel := context.WithTimeout(ctx, s.wait)
					t0 := time.Now()
					release, err := c.acquire(callCtx, set, o.read)
					waited := time.Since(t0)
					if err != nil {
						cancel()
						if nerr.Add(1) == 1 {
							mu.Lock()
							sample = err.Error()
							mu.Unlock()
						}
						continue
					}
					for _, l := range o.locks {
						if !enter(&guards[l], o.read) {
							viol.Add(1)
						}
					}
					if pt.hold > 0 {
						time.Sleep(pt.hold) // the critical section: the workload, not synchronisation
					}
					for _, l := range o.locks {
						leave(&guards[l], o.read)
					}
					if err := release(callCtx); err != nil && nerr.Add(1) == 1 {
						mu.Lock()
						sample = "release: " + err.Error()
						mu.Unlock()
					}
					cancel()
					perG[gi]++
					if o.read {
						myReads = append(myReads, waited)
					} else {
						myWrites = append(myWrites, waited)
					}
				}
				mu.Lock()
				reads = append(reads, myReads...)
				writes = append(writes, myWrites...)
				mu.Unlock()
			})
		}
	}
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)
	after, err := commandCount(ctx, addrs)
	if err != nil {
		return fr, 0, 0, "", err
	}
	fr.Ops = len(reads) + len(writes)
	fr.OpsPerSec = float64(fr.Ops) / elapsed.Seconds()
	fr.ReadP50, fr.ReadP99, _ = percentiles(reads)
	fr.WriteP50, fr.WriteP99, fr.WriteMax = percentiles(writes)
	fr.Commands = after - before
	fr.Jain = measure.Jain(perG)
	return fr, int(viol.Load()), int(nerr.Load()), sample, nil
}

// enter registers a holder with g and reports whether that is allowed: a
// reader beside readers only, a writer alone.
func enter(g *guard, read bool) bool {
	if read {
		g.readers.Add(1)
		return g.writers.Load() == 0
	}
	w := g.writers.Add(1)
	return w == 1 && g.readers.Load() == 0
}

func leave(g *guard, read bool) {
	if read {
		g.readers.Add(-1)
	} else {
		g.writers.Add(-1)
	}
}

func percentiles(ds []time.Duration) (p50, p99, maxMs float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(measure.Percentile(ds, 0.5)), ms(measure.Percentile(ds, 0.99)), ms(ds[len(ds)-1])
}

// commandCount sums the calls of every command on every server (INFO
// commandstats; commands run by Lua scripts count too, as Redis does work
// for them), minus nothing: the probe's own INFO is one call per server.
func commandCount(ctx context.Context, addrs []string) (int64, error) {
	var total int64
	for _, a := range addrs {
		rc, err := newRueidis(a)
		if err != nil {
			return 0, err
		}
		info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
		rc.Close()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(info, "\n") {
			_, rest, ok := strings.Cut(line, ":calls=")
			if !ok {
				continue
			}
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err == nil {
				total += v
			}
		}
	}
	return total, nil
}
