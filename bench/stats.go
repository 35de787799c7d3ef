package main

import (
	"cmp"
	"slices"
	"time"

	"github.com/relockio/relock/internal/measure"
)

// Point is one configuration of a scenario; every contender runs it.
type Point struct {
	Scenario         string        `json:"scenario"` // hot, many, handoff
	Label            string        `json:"label"`
	Workers          int           `json:"workers"`            // OS processes
	ClientsPerWorker int           `json:"clients_per_worker"` // lock clients in each
	Goroutines       int           `json:"goroutines"`         // in all
	Locks            int           `json:"locks"`
	Hold             time.Duration `json:"hold_ns"`
	Duration         time.Duration `json:"duration_ns,omitempty"` // 0: the -duration of the run
}

// Clients is the number of lock clients of the point.
func (p Point) Clients() int { return p.Workers * p.ClientsPerWorker }

// Result is what one run of one contender at one point measured, or (in
// Summary) the median over the rounds. Durations are in milliseconds.
type Result struct {
	Contender string `json:"contender"`
	Round     int    `json:"round,omitempty"` // 0 in a median

	Acquisitions int64   `json:"acquisitions"` // all, including those of waits drained after the deadline
	InWindow     int64   `json:"in_window"`    // acquired before the deadline
	PerSecond    float64 `json:"acquisitions_per_s"`
	WaitP50      float64 `json:"wait_p50_ms"`
	WaitP99      float64 `json:"wait_p99_ms"`
	WaitMax      float64 `json:"wait_max_ms"` // the longest wait, finished or not
	HandoffP50   float64 `json:"handoff_p50_ms"`
	HandoffP99   float64 `json:"handoff_p99_ms"`
	HandoffN     int     `json:"handoff_samples"`
	// HoldMean is the mean time a holder kept the lock (Lock returned to
	// Unlock called): the critical section as it ran. Utilization is the
	// share of the run's time the locks were held, summed over the
	// acquisitions in the window: acquisitions/s as a fraction of the ideal,
	// one hold after another with nothing between (Locks / HoldMean per s).
	HoldMean    float64 `json:"hold_mean_ms"`
	Utilization float64 `json:"utilization"`
	Jain        float64 `json:"fairness_jain"`
	Starved     int     `json:"goroutines_never_served"`

	// Client side: commands the contender's clients sent, per acquisition.
	RequestsPerAcq float64          `json:"requests_per_acq"`
	Requests       map[string]int64 `json:"requests,omitempty"`
	// Server side: INFO commandstats delta, less the bench's INFO and probes; commands run by Lua scripts count one each,
	// as does the script call.
	CommandsPerAcq float64          `json:"redis_commands_per_acq"`
	Commands       map[string]int64 `json:"redis_commands,omitempty"`
	CPUPer1k       float64          `json:"redis_cpu_ms_per_1k_acq"`

	Lost     int64  `json:"counter_lost_updates"` // |expected - actual|, summed over the counters
	Overlaps int64  `json:"overlapping_holds"`    // acquisitions while the previous holder had not yet started to release
	Stuck    int    `json:"stuck_waiters"`
	DrainCut int    `json:"waits_cut_at_drain_limit"`
	Timeouts int    `json:"wait_timeouts"`
	Errors   int    `json:"errors"`
	ErrorMsg string `json:"error_sample,omitempty"`

	Seconds float64 `json:"run_seconds"` // wall time of the run, set-up and drain included
}

// serverDelta is what Redis did during a run.
type serverDelta struct {
	commands map[string]int64
	cpu      float64 // seconds
}

// aggregate turns the workers' results into a Result.
func aggregate(pt Point, slug string, ws []WorkerResult, d serverDelta, counters map[int]int64) Result {
	r := Result{Contender: slug, Requests: map[string]int64{}}
	var recs []Record
	perG := make([]int64, pt.Goroutines)
	expected := map[int]int64{}
	var duration int64
	for _, w := range ws {
		duration = max(duration, w.Deadline-w.Start)
		for _, rec := range w.Records {
			if rec[recAcq] <= w.Deadline {
				r.InWindow++
				if g := int(rec[recG]); g >= 0 && g < len(perG) {
					perG[g]++
				}
			}
			expected[int(rec[recLock])] += rec[recInc]
		}
		recs = append(recs, w.Records...)
		for _, u := range w.Unfinished {
			switch u.Reason {
			case "stuck":
				r.Stuck++
			case "drain-limit":
				r.DrainCut++
			case "wait-timeout":
				r.Timeouts++
			}
			r.WaitMax = max(r.WaitMax, ms(u.End-u.Start))
		}
		for k, v := range w.Requests {
			r.Requests[k] += v
		}
		r.Errors += w.Errors
		if r.ErrorMsg == "" {
			r.ErrorMsg = w.ErrorSample
		}
	}
	r.Acquisitions = int64(len(recs))
	if duration > 0 {
		r.PerSecond = float64(r.InWindow) / time.Duration(duration).Seconds()
	}
	var held, heldInWindow int64
	for _, w := range ws {
		for _, rec := range w.Records {
			h := rec[recRel] - rec[recAcq]
			held += h
			if rec[recAcq] <= w.Deadline {
				heldInWindow += min(h, w.Deadline-rec[recAcq])
			}
		}
	}
	if len(recs) > 0 {
		r.HoldMean = ms(held / int64(len(recs)))
	}
	if duration > 0 && pt.Locks > 0 {
		r.Utilization = float64(heldInWindow) / float64(duration) / float64(pt.Locks)
	}

	waits := make([]int64, len(recs))
	for i, rec := range recs {
		waits[i] = rec[recAcq] - rec[recStart]
	}
	slices.Sort(waits)
	r.WaitP50 = ms(measure.Percentile(waits, 0.50))
	r.WaitP99 = ms(measure.Percentile(waits, 0.99))
	if len(waits) > 0 {
		r.WaitMax = max(r.WaitMax, ms(waits[len(waits)-1]))
	}

	// Hand-offs and overlaps, lock by lock in order of acquisition.
	slices.SortFunc(recs, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a[recLock], b[recLock]), cmp.Compare(a[recAcq], b[recAcq]))
	})
	var handoffs []int64
	for i := 1; i < len(recs); i++ {
		prev, next := recs[i-1], recs[i]
		if prev[recLock] != next[recLock] {
			continue
		}
		if next[recAcq] < prev[recRel] {
			r.Overlaps++
			continue
		}
		if next[recStart] < prev[recRel] { // it was waiting when the release began
			handoffs = append(handoffs, next[recAcq]-prev[recRel])
		}
	}
	slices.Sort(handoffs)
	r.HandoffN = len(handoffs)
	r.HandoffP50 = ms(measure.Percentile(handoffs, 0.50))
	r.HandoffP99 = ms(measure.Percentile(handoffs, 0.99))

	r.Jain = measure.Jain(perG)
	for _, n := range perG {
		if n == 0 {
			r.Starved++
		}
	}

	for lock, want := range expected {
		r.Lost += abs(want - counters[lock])
	}
	for lock, got := range counters {
		if _, ok := expected[lock]; !ok {
			r.Lost += abs(got)
		}
	}

	var reqs int64
	for _, n := range r.Requests {
		reqs += n
	}
	r.Commands = map[string]int64{}
	probes := map[string]int64{}
	for _, w := range ws {
		for name, n := range w.Probes {
			probes[name] += n
		}
	}
	var cmds int64
	for name, n := range d.commands {
		n -= probes[name] // the monitor's probes
		switch name {
		case "info": // the bench's own snapshots
			continue
		}
		if n > 0 {
			r.Commands[name] = n
			cmds += n
		}
	}
	if r.Acquisitions > 0 {
		a := float64(r.Acquisitions)
		r.RequestsPerAcq = float64(reqs) / a
		r.CommandsPerAcq = float64(cmds) / a
		r.CPUPer1k = d.cpu * 1000 / a * 1000
	}
	return r
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// median summarises the rounds of one contender at one point: the median of
// every figure, and the sum of every failure count (one failure in any round
// is a failure).
func median(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	med := func(f func(Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		slices.Sort(xs)
		if n := len(xs); n%2 == 1 {
			return xs[n/2]
		} else {
			return (xs[n/2-1] + xs[n/2]) / 2
		}
	}
	m := Result{Contender: rs[0].Contender}
	m.Acquisitions = int64(med(func(r Result) float64 { return float64(r.Acquisitions) }))
	m.InWindow = int64(med(func(r Result) float64 { return float64(r.InWindow) }))
	m.PerSecond = med(func(r Result) float64 { return r.PerSecond })
	m.WaitP50 = med(func(r Result) float64 { return r.WaitP50 })
	m.HoldMean = med(func(r Result) float64 { return r.HoldMean })
	m.Utilization = med(func(r Result) float64 { return r.Utilization })
	m.WaitP99 = med(func(r Result) float64 { return r.WaitP99 })
	m.WaitMax = med(func(r Result) float64 { return r.WaitMax })
	m.HandoffP50 = med(func(r Result) float64 { return r.HandoffP50 })
	m.HandoffP99 = med(func(r Result) float64 { return r.HandoffP99 })
	m.HandoffN = int(med(func(r Result) float64 { return float64(r.HandoffN) }))
	m.Jain = med(func(r Result) float64 { return r.Jain })
	m.Starved = int(med(func(r Result) float64 { return float64(r.Starved) }))
	m.RequestsPerAcq = med(func(r Result) float64 { return r.RequestsPerAcq })
	m.CommandsPerAcq = med(func(r Result) float64 { return r.CommandsPerAcq })
	m.CPUPer1k = med(func(r Result) float64 { return r.CPUPer1k })
	m.Seconds = med(func(r Result) float64 { return r.Seconds })
	for _, r := range rs {
		m.Lost += r.Lost
		m.Overlaps += r.Overlaps
		m.Stuck += r.Stuck
		m.DrainCut += r.DrainCut
		m.Timeouts += r.Timeouts
		m.Errors += r.Errors
		if m.ErrorMsg == "" {
			m.ErrorMsg = r.ErrorMsg
		}
	}
	return m
}

// verdict is the correctness column: "ok", or what went wrong.
func (r Result) verdict() string {
	var s []string
	if r.Lost > 0 {
		s = append(s, "LOST "+itoa(r.Lost))
	}
	if r.Overlaps > 0 {
		s = append(s, "OVERLAP "+itoa(r.Overlaps))
	}
	if r.Stuck > 0 {
		s = append(s, "STUCK "+itoa(int64(r.Stuck)))
	}
	if r.DrainCut > 0 {
		s = append(s, "cut "+itoa(int64(r.DrainCut)))
	}
	if r.Timeouts > 0 {
		s = append(s, "timeout "+itoa(int64(r.Timeouts)))
	}
	if r.Errors > 0 {
		s = append(s, "err "+itoa(int64(r.Errors)))
	}
	if len(s) == 0 {
		return "ok"
	}
	out := s[0]
	for _, x := range s[1:] {
		out += ", " + x
	}
	return out
}

// failed tells whether the contender broke something at this point: lost
// updates, overlapping holds, stuck waiters or errors (slow drains are not
// failures).
func (r Result) failed() bool {
	return r.Lost > 0 || r.Overlaps > 0 || r.Stuck > 0 || r.Errors > 0
}
