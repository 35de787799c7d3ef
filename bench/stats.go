package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/relockio/relock/internal/measure"
)

// Point is one configuration of a scenario; every contender runs it.
type Point struct {
	Scenario         string        `json:"scenario"` // hot, many, handoff, handoff-xproc, fleet, fleet-inproc, blocked, entity-new, entity-own
	Label            string        `json:"label"`
	Workers          int           `json:"workers"`            // OS processes
	ClientsPerWorker int           `json:"clients_per_worker"` // lock clients in each
	Goroutines       int           `json:"goroutines"`         // in all
	Locks            int           `json:"locks"`
	Hold             time.Duration `json:"hold_ns"`
	// HoldMax > Hold draws each critical section uniformly from [Hold, HoldMax).
	HoldMax  time.Duration `json:"hold_max_ns,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"` // 0: the -duration of the run
	// Window is the measurement window of the blocked point: every waiter
	// is blocked in Lock on a lock held by the bench for this long.
	Window time.Duration `json:"window_ns,omitempty"`
	// Target is the Redis the point runs on: "" the bench's own server, or
	// a cluster the bench started (see cluster.go).
	Target string `json:"target,omitempty"`
	// FreshNames gives every acquisition a lock name never used before
	// (entity-new: "lock order-123 while processing it"); each goroutine
	// then has a counter of its own (Locks = Goroutines).
	FreshNames bool `json:"fresh_names,omitempty"`
	// Contenders, when set, are the only contenders that run at the point;
	// otherwise every contender but the ClusterOnly ones does.
	Contenders []string `json:"contenders,omitempty"`
}

// runs tells whether contender c runs at the point.
func (p Point) runs(c Contender) bool {
	if p.Contenders != nil {
		return slices.Contains(p.Contenders, c.Slug)
	}
	return !c.ClusterOnly
}

// Config names the point's configuration in words: how many processes,
// Clients and goroutines, and whether hand-offs between Clients cross
// processes.
func (p Point) Config() string {
	if p.Scenario == "blocked" {
		return fmt.Sprintf("%d waiters, one client and one goroutine each in its own process; the holder: a client in the bench process", p.Goroutines)
	}
	s := fmt.Sprintf("%d process(es), %d client(s), %d goroutines, %d lock(s)", p.Workers, p.Clients(), p.Goroutines, p.Locks)
	switch {
	case p.FreshNames:
		return fmt.Sprintf("%d process(es), %d client(s), %d goroutines; every acquisition a lock name never used before: uncontended", p.Workers, p.Clients(), p.Goroutines)
	case isEntityPoint(p):
		return s + "; every goroutine its own lock, re-locked in a loop: uncontended"
	case p.Clients() < 2:
	case p.ClientsPerWorker == 1:
		s += "; every Client its own process: x-client hand-offs cross processes"
	case p.Workers == 1:
		s += "; all Clients in one process: x-client hand-offs stay in it"
	}
	if isClusterPoint(p) {
		s += "; on " + describeTarget(p.Target)
	}
	return s
}

// clientOf returns the global number of the lock client that goroutine g
// used: the worker runs goroutines g with g / perWorker == its number, and
// its local goroutine i uses its client i % ClientsPerWorker.
func (p Point) clientOf(g int64) int64 {
	perWorker := int64(max(p.Goroutines/max(p.Workers, 1), 1))
	w, i := g/perWorker, g%perWorker
	return w*int64(p.ClientsPerWorker) + i%int64(max(p.ClientsPerWorker, 1))
}

// acrossProcesses tells whether hand-offs between Clients of the point
// cross processes.
func (p Point) acrossProcesses() bool { return p.ClientsPerWorker == 1 && p.Workers > 1 }

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
	// The hand-offs above whose next holder used another lock client than
	// the previous one: for rlock these go through Redis (a pub/sub
	// message), where the others may be local passes between goroutines of
	// one Client. Between processes when every Client is its own process.
	XHandoffP50 float64 `json:"handoff_between_clients_p50_ms"`
	XHandoffP99 float64 `json:"handoff_between_clients_p99_ms"`
	XHandoffN   int     `json:"handoff_between_clients_samples"`
	// XHandoffEndN counts the hand-offs between clients that followed the
	// previous holder's last acquisition of the run: its Unlock may keep
	// the lock for a Lock that never comes (rlock's turns linger), so they
	// take a linger longer than the rest. XHandoffMidP99 is the p99 of the
	// others.
	XHandoffEndN   int     `json:"handoff_between_clients_run_end_samples"`
	XHandoffMidP99 float64 `json:"handoff_between_clients_p99_without_run_ends_ms"`
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
	// Pub/sub messages the contender's clients received, per acquisition
	// (rlock and the semaphore, through their Client's multiplexer stats;
	// MessagesCounted is false where that count is not available).
	MessagesPerAcq  float64 `json:"pubsub_messages_per_acq"`
	Messages        int64   `json:"pubsub_messages"`
	MessagesCounted bool    `json:"pubsub_messages_counted"`

	// The blocked point: Redis commands per blocked waiter per second
	// during the window (INFO commandstats delta, every client of the
	// contender included: the K waiters and the holder), PING apart from
	// everything else.
	Blocked *BlockedCost `json:"blocked,omitempty"`

	// A point on a Redis Cluster: the publish messages its nodes sent each
	// other over the cluster bus during the run (CLUSTER INFO
	// cluster_stats_messages_publish_sent, summed over the nodes; classic
	// PUBLISH is broadcast to every other node), and the publishshard ones
	// (SPUBLISH, sent to the replicas of the shard only), in all and per
	// acquisition. BusCounted is false elsewhere.
	BusCounted          bool    `json:"bus_counted,omitempty"`
	BusPublish          int64   `json:"bus_publish_sent,omitempty"`
	BusPublishShard     int64   `json:"bus_publishshard_sent,omitempty"`
	BusPublishPerAcq    float64 `json:"bus_publish_per_acq,omitempty"`
	BusPublishShPerAcq  float64 `json:"bus_publishshard_per_acq,omitempty"`
	PublishPerAcq       float64 `json:"publish_per_acq,omitempty"`  // PUBLISH commands Redis ran (Lua's included), per acquisition
	SPublishPerAcq      float64 `json:"spublish_per_acq,omitempty"` // SPUBLISH commands, the same
	BusiestNodeCPUShare float64 `json:"busiest_node_cpu_share,omitempty"`

	Lost     int64  `json:"counter_lost_updates"` // |expected - actual|, summed over the counters
	Overlaps int64  `json:"overlapping_holds"`    // acquisitions while the previous holder had not yet started to release
	Stuck    int    `json:"stuck_waiters"`
	DrainCut int    `json:"waits_cut_at_drain_limit"`
	Timeouts int    `json:"wait_timeouts"`
	Errors   int    `json:"errors"`
	ErrorMsg string `json:"error_sample,omitempty"`

	Seconds float64 `json:"run_seconds"` // wall time of the run, set-up and drain included
}

// BlockedCost is what K waiters blocked on a held lock cost Redis.
type BlockedCost struct {
	Waiters        int     `json:"waiters"`
	WindowS        float64 `json:"window_s"`
	PingPerWaiterS float64 `json:"ping_per_waiter_s"`
	CmdPerWaiterS  float64 `json:"other_commands_per_waiter_s"` // everything but PING
	// ConnsPerClient is the contender's connections to Redis at the start
	// of the window (CLIENT LIST, less those there before the run), per
	// client (the K waiters' and the holder's): rueidis PINGs each idle one
	// about once a second.
	ConnsPerClient float64          `json:"connections_per_client"`
	Commands       map[string]int64 `json:"redis_commands"` // the window's INFO commandstats delta
	// Early counts waiters that got the lock before the holder's Unlock:
	// the hold was lost (a lease ran out) or exclusion broke.
	Early int `json:"acquired_before_release"`
}

// serverDelta is what Redis did during a run.
type serverDelta struct {
	commands map[string]int64
	cpu      float64 // seconds
	// bus is the cluster bus's publish messages by type (busPublish,
	// busPublishShard), counted only on a cluster.
	bus     map[string]int64
	counted bool
	// busiestCPU is the CPU time of the busiest node over the wall time
	// between the snapshots: near 1, that node is the bottleneck.
	busiestCPU float64
}

// aggregate turns the workers' results into a Result.
func aggregate(pt Point, slug string, ws []WorkerResult, d serverDelta, counters map[int]int64) Result {
	r := Result{Contender: slug, Requests: map[string]int64{}, MessagesCounted: len(ws) > 0}
	for _, w := range ws {
		r.MessagesCounted = r.MessagesCounted && w.MessagesCounted
	}
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
		r.Messages += w.Messages
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
	lastAcq := map[int64]int64{} // goroutine -> its last acquisition
	for _, rec := range recs {
		lastAcq[rec[recG]] = max(lastAcq[rec[recG]], rec[recAcq])
	}
	var handoffs, xhandoffs, xmid []int64
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
			if pt.clientOf(next[recG]) != pt.clientOf(prev[recG]) {
				xhandoffs = append(xhandoffs, next[recAcq]-prev[recRel])
				if prev[recAcq] == lastAcq[prev[recG]] {
					r.XHandoffEndN++
				} else {
					xmid = append(xmid, next[recAcq]-prev[recRel])
				}
			}
		}
	}
	slices.Sort(handoffs)
	slices.Sort(xhandoffs)
	r.XHandoffN = len(xhandoffs)
	r.XHandoffP50 = ms(measure.Percentile(xhandoffs, 0.50))
	r.XHandoffP99 = ms(measure.Percentile(xhandoffs, 0.99))
	slices.Sort(xmid)
	r.XHandoffMidP99 = ms(measure.Percentile(xmid, 0.99))
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
		case "info", "cluster|info": // the bench's own snapshots
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
		if r.MessagesCounted {
			r.MessagesPerAcq = float64(r.Messages) / a
		}
		r.PublishPerAcq = float64(r.Commands["publish"]) / a
		r.SPublishPerAcq = float64(r.Commands["spublish"]) / a
	}
	r.BusiestNodeCPUShare = d.busiestCPU
	if d.counted {
		r.BusCounted = true
		r.BusPublish, r.BusPublishShard = d.bus[busPublish], d.bus[busPublishShard]
		if r.Acquisitions > 0 {
			r.BusPublishPerAcq = float64(r.BusPublish) / float64(r.Acquisitions)
			r.BusPublishShPerAcq = float64(r.BusPublishShard) / float64(r.Acquisitions)
		}
	}
	if !r.MessagesCounted {
		r.Messages = 0
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
	m.XHandoffP50 = med(func(r Result) float64 { return r.XHandoffP50 })
	m.XHandoffP99 = med(func(r Result) float64 { return r.XHandoffP99 })
	m.XHandoffN = int(med(func(r Result) float64 { return float64(r.XHandoffN) }))
	m.XHandoffEndN = int(med(func(r Result) float64 { return float64(r.XHandoffEndN) }))
	m.XHandoffMidP99 = med(func(r Result) float64 { return r.XHandoffMidP99 })
	m.MessagesCounted = true
	for _, r := range rs {
		m.MessagesCounted = m.MessagesCounted && r.MessagesCounted
	}
	if m.MessagesCounted {
		m.MessagesPerAcq = med(func(r Result) float64 { return r.MessagesPerAcq })
		m.Messages = int64(med(func(r Result) float64 { return float64(r.Messages) }))
	}
	var blocked []*BlockedCost
	for _, r := range rs {
		if r.Blocked != nil {
			blocked = append(blocked, r.Blocked)
		}
	}
	if len(blocked) > 0 {
		medB := func(f func(*BlockedCost) float64) float64 {
			xs := make([]float64, len(blocked))
			for i, b := range blocked {
				xs[i] = f(b)
			}
			return medianOf(xs)
		}
		m.Blocked = &BlockedCost{
			Waiters:        blocked[0].Waiters,
			WindowS:        medB(func(b *BlockedCost) float64 { return b.WindowS }),
			PingPerWaiterS: medB(func(b *BlockedCost) float64 { return b.PingPerWaiterS }),
			CmdPerWaiterS:  medB(func(b *BlockedCost) float64 { return b.CmdPerWaiterS }),
			ConnsPerClient: medB(func(b *BlockedCost) float64 { return b.ConnsPerClient }),
			Commands:       map[string]int64{},
		}
		for _, b := range blocked {
			m.Blocked.Early += b.Early
			for k, v := range b.Commands {
				m.Blocked.Commands[k] += v // summed over the rounds
			}
		}
	}
	m.Jain = med(func(r Result) float64 { return r.Jain })
	m.Starved = int(med(func(r Result) float64 { return float64(r.Starved) }))
	m.RequestsPerAcq = med(func(r Result) float64 { return r.RequestsPerAcq })
	m.CommandsPerAcq = med(func(r Result) float64 { return r.CommandsPerAcq })
	m.CPUPer1k = med(func(r Result) float64 { return r.CPUPer1k })
	m.Seconds = med(func(r Result) float64 { return r.Seconds })
	m.PublishPerAcq = med(func(r Result) float64 { return r.PublishPerAcq })
	m.SPublishPerAcq = med(func(r Result) float64 { return r.SPublishPerAcq })
	m.BusiestNodeCPUShare = med(func(r Result) float64 { return r.BusiestNodeCPUShare })
	m.BusCounted = true
	for _, r := range rs {
		m.BusCounted = m.BusCounted && r.BusCounted
	}
	if m.BusCounted {
		m.BusPublish = int64(med(func(r Result) float64 { return float64(r.BusPublish) }))
		m.BusPublishShard = int64(med(func(r Result) float64 { return float64(r.BusPublishShard) }))
		m.BusPublishPerAcq = med(func(r Result) float64 { return r.BusPublishPerAcq })
		m.BusPublishShPerAcq = med(func(r Result) float64 { return r.BusPublishShPerAcq })
	}
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
	if r.Blocked != nil && r.Blocked.Early > 0 {
		s = append(s, "EARLY "+itoa(int64(r.Blocked.Early)))
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
	return r.Lost > 0 || r.Overlaps > 0 || r.Stuck > 0 || r.Errors > 0 || (r.Blocked != nil && r.Blocked.Early > 0)
}
