package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is everything a bench run found; results.json is its JSON.
type Report struct {
	Started    string            `json:"started"`
	Elapsed    float64           `json:"elapsed_s"`
	Go         string            `json:"go"`
	Module     string            `json:"relock"` // commit of the tree under test
	CPUs       int               `json:"cpus"`
	Server     map[string]string `json:"server"`
	Settings   map[string]any    `json:"settings"`
	Contenders []ContenderInfo   `json:"contenders"`
	Pings      []PingFloor       `json:"loopback_floor"`
	PubSub     []PubSubFloor     `json:"pubsub_floor"`
	Points     []PointReport     `json:"points"`
	// Entity is the entity points' comparison (entity.go), when they ran.
	Entity  []EntitySummary   `json:"entity,omitempty"`
	Figures map[string]string `json:"figures"` // what each figure means
	// LoadAvg is the machine's load average (1, 5, 15 minutes) at the start
	// and at the end of the run: the other work the figures ran beside.
	LoadAvg []string `json:"load_average"`
}

// ContenderInfo describes a contender in the report.
type ContenderInfo struct {
	Slug   string `json:"slug"`
	Name   string `json:"name"`
	Config string `json:"config"`
}

// PingFloor is one round's PING round trip, in milliseconds.
type PingFloor struct {
	Round int     `json:"round"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// PointReport is one point: every round of every contender, and the medians.
type PointReport struct {
	Point
	Rounds  []Result `json:"rounds"`
	Summary []Result `json:"median"` // one per contender, in registry order
}

var figures = map[string]string{
	"acquisitions_per_s":       "acquisitions completed before the run's deadline, divided by the run's duration",
	"wait_p50_ms/p99/max":      "Lock call to Lock return, over all acquisitions (max also counts waits that never finished)",
	"handoff_p50_ms/p99":       "Unlock called by one holder to Lock returned in the next holder of the same lock, counted when the next holder was already waiting when the release began (CLOCK_MONOTONIC, comparable across the worker processes)",
	"requests_per_acq":         "client side: commands the contender's clients sent (a script call is one request; pub/sub SUBSCRIBE/UNSUBSCRIBE count; connection handshakes do not), per acquisition",
	"redis_commands_per_acq":   "server side: INFO commandstats delta per acquisition; Redis counts a script call once plus once per command the script runs; the bench's INFO and its stuck-waiter probes are left out",
	"redis_cpu_ms_per_1k_acq":  "INFO used_cpu_user+used_cpu_sys delta per 1,000 acquisitions",
	"hold_mean_ms":             "mean time a holder kept the lock (Lock returned to Unlock called): the critical section as it ran, sleep overshoot included",
	"utilization":              "share of the run the lock(s) were held (acquisitions in the window): throughput as a fraction of the ideal, one hold after another with nothing between",
	"fairness_jain":            "Jain's index over per-goroutine acquisition counts within the run: 1 = all equal, 1/n = one goroutine got everything",
	"counter_lost_updates":     "each critical section increments a counter in memory shared by the worker processes (a load, then a store); any difference between the acquisitions and the counter is a lost update (two holders at once)",
	"overlapping_holds":        "acquisitions whose timestamp precedes the previous holder's Unlock call on the same lock",
	"stuck_waiters":            "after the run, goroutines still inside Lock while their lock stayed free (and untaken) for -stuck-after; the bench ends those waits",
	"waits_cut_at_drain_limit": "after the run, waits still open at -drain-limit although the lock kept changing hands (slow retries, not stuck); ended by the bench",
	"handoff_between_clients":  "the hand-offs whose next holder used another lock client than the previous holder (for rlock: through Redis, not a local pass); between processes where every client is its own process (hot, fleet, handoff-xproc), within one process in fleet-inproc and handoff",
	"pubsub_messages_per_acq":  "pub/sub messages received by the contender's clients (every process, every client) per acquisition, from the rlock Client's multiplexer stats (PubSubStats().Messages); rlock and semaphore only, when the library exposes the counter",
	"pubsub_floor":             "bare rueidis pub/sub: PUBLISH call start in the bench process to receipt in a worker process (dedicated connection, SUBSCRIBE, as rlock's multiplexer), one message every 10-20ms (uniform), CLOCK_MONOTONIC; p50/p99 per round",
	"bus_publish_per_acq":      "cluster points: publish messages the cluster's nodes sent each other over the cluster bus (CLUSTER INFO cluster_stats_messages_publish_sent delta, summed over the nodes) per acquisition; classic PUBLISH is broadcast to every other node, sharded SPUBLISH is not",
	"bus_publishshard_per_acq": "cluster points: the same for cluster_stats_messages_publishshard_sent (SPUBLISH forwarded to the replicas of the shard; the bench's clusters have none)",
	"busiest_node_cpu_share":   "INFO used_cpu_user+used_cpu_sys delta of the busiest node (of the point's server or cluster) over the wall time of the run: near 1, that Redis process is the bottleneck",
	"blocked":                  "K waiters (one client, one goroutine, one worker process each) blocked on a lock that a client of the same contender in the bench process holds; INFO commandstats delta over the window per waiter per second, PING apart from all other commands; the holder's commands count too (1 of K+1 clients)",
}

func newReport(cfg config, points []Point, cs []Contender) *Report {
	r := &Report{
		Started: time.Now().UTC().Format(time.RFC3339),
		Go:      runtime.Version(),
		CPUs:    runtime.NumCPU(),
		Settings: map[string]any{
			"quick": cfg.quick, "rounds": cfg.rounds, "duration": cfg.duration.String(), "wait": cfg.wait.String(),
			"stuck_after": cfg.stuckAfter.String(), "drain_limit": cfg.drainLimit.String(), "pings": cfg.pings,
			"known_stuck": cfg.knownStuck, "fleet_procs": cfg.fleetProcs, "holds": fmt.Sprint(cfg.holds), "fleet_inproc_holds": fmt.Sprint(cfg.inprocHolds), "handoff_duration": cfg.handoffDur.String(),
			"blocked_waiters": cfg.blockedK, "blocked_window": cfg.blockedWin.String(), "floor_msgs": cfg.floorMsgs, "entity_n": cfg.entityN,
			"cluster_procs": cfg.clusterProcs, "cluster_goroutines": cfg.clusterG, "cluster_sharing": fmt.Sprint(cfg.clusterSharing), "cluster_hot_procs": cfg.clusterHotProcs, "cluster_duration": cfg.clusterDur.String(),
		},
		Figures: figures,
	}
	for _, c := range cs {
		r.Contenders = append(r.Contenders, ContenderInfo{Slug: c.Slug, Name: c.Name, Config: c.Config})
	}
	for _, p := range points {
		r.Points = append(r.Points, PointReport{Point: p})
	}
	return r
}

func (r *Report) add(point int, res Result) {
	r.Points[point].Rounds = append(r.Points[point].Rounds, res)
}

// finish computes the medians.
func (r *Report) finish() {
	for i := range r.Points {
		p := &r.Points[i]
		p.Summary = nil
		for _, c := range r.Contenders {
			var rs []Result
			for _, x := range p.Rounds {
				if x.Contender == c.Slug {
					rs = append(rs, x)
				}
			}
			if len(rs) > 0 {
				p.Summary = append(p.Summary, median(rs))
			}
		}
	}
	r.Entity = r.entitySummaries()
}

func (r *Report) name(slug string) string {
	for _, c := range r.Contenders {
		if c.Slug == slug {
			return c.Name
		}
	}
	return slug
}

func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// floors returns the medians over the rounds of the loopback PING floor
// and of the pub/sub floor (zeros when not measured).
func (r *Report) floors() (ping50, ping99, ps50, ps99 float64) {
	var a, b, c, d []float64
	for _, p := range r.Pings {
		a, b = append(a, p.P50), append(b, p.P99)
	}
	for _, p := range r.PubSub {
		if p.Sent > p.Lost && !p.Turn && p.by() == byPublish {
			c, d = append(c, p.P50), append(d, p.P99)
		}
	}
	return medianOf(a), medianOf(b), medianOf(c), medianOf(d)
}

// by tells what published the probe's messages.
func (p PubSubFloor) by() floorBy {
	switch {
	case p.Handoff:
		return byHandoff
	case p.Script:
		return byScript
	}
	return byPublish
}

// turnFloor returns the medians over the rounds of the pub/sub floor after a
// turn's idle (100-200ms; zeros when not measured), published as by says.
func (r *Report) turnFloor(by floorBy) (p50, p99 float64) {
	var c, d []float64
	for _, p := range r.PubSub {
		if p.Sent > p.Lost && p.Turn && p.by() == by {
			c, d = append(c, p.P50), append(d, p.P99)
		}
	}
	return medianOf(c), medianOf(d)
}

// printTable prints one block per point, one row per contender, medians.
func (r *Report) printTable(w io.Writer) {
	ping50, ping99, ps50, ps99 := r.floors()
	if len(r.Pings) > 0 {
		fmt.Fprintf(w, "Loopback floor (sequential PING round trip, median of rounds): p50 %s, p99 %s\n", fmtMs(ping50), fmtMs(ping99))
	}
	if len(r.PubSub) > 0 {
		lost := 0
		var rtt50, rtt99 []float64
		for _, p := range r.PubSub {
			if p.Turn || p.by() != byPublish {
				continue
			}
			lost += p.Lost
			rtt50, rtt99 = append(rtt50, p.PublishP50), append(rtt99, p.PublishP99)
		}
		fmt.Fprintf(w, "Pub/sub floor (bare rueidis PUBLISH call start -> receipt in another process, one message every 10-20ms, median of rounds): p50 %s, p99 %s (%.1fx / %.1fx the PING floor; %d lost; the PUBLISH round trip itself p50 %s, p99 %s)\n",
			fmtMs(ps50), fmtMs(ps99), ratio(ps50, ping50), ratio(ps99, ping99), lost, fmtMs(medianOf(rtt50)), fmtMs(medianOf(rtt99)))
		if t50, t99 := r.turnFloor(byPublish); t50 > 0 {
			fmt.Fprintf(w, "Pub/sub floor after a turn's idle (the same, one message every 100-200ms, as between two cross-process hand-offs when a Client keeps the lock for ~8 holds of 10-20ms): p50 %s, p99 %s\n", fmtMs(t50), fmtMs(t99))
		}
		if s50, s99 := r.turnFloor(byScript); s50 > 0 {
			fmt.Fprintf(w, "Script floor after a turn's idle (the same, published by a one-line Lua script, EVALSHA, instead of PUBLISH: the least any hand-off made by a script costs): p50 %s, p99 %s\n", fmtMs(s50), fmtMs(s99))
		}
		if h50, h99 := r.turnFloor(byHandoff); h50 > 0 {
			fmt.Fprintf(w, "Hand-off floor after a turn's idle (the same, published by the least a hand-off that keeps a lock safe does: owner check, queue head taken, lock re-made for it with a lease, fencing token, PUBLISH; 8 commands in one script): p50 %s, p99 %s\n", fmtMs(h50), fmtMs(h99))
		}
	}
	fmt.Fprintln(w, "Medians over the rounds; handoff = every hand-off to a waiting goroutine, x-client = those to a goroutine of another Client (for rlock: through Redis);")
	fmt.Fprintln(w, "req = requests sent by the clients, cmd = commands Redis ran (Lua's inner commands count), cpu = Redis CPU ms per 1,000 acquisitions, msg = pub/sub messages received.")
	head := []string{"contender", "acq/s", "util", "wait p50", "p99", "max", "handoff p50", "p99", "x-client p50", "p99", "req/acq", "cmd/acq", "cpu/1k", "msg/acq", "jain", "correctness"}
	for _, p := range r.Points {
		fmt.Fprintf(w, "\n%s  (%s)\n", p.Label, p.Config())
		if p.Scenario == "blocked" {
			r.printBlocked(w, p)
			continue
		}
		rows := [][]string{head}
		for _, s := range p.Summary {
			handoff50, handoff99, x50, x99, msgs := "-", "-", "-", "-", "-"
			if s.HandoffN > 0 {
				handoff50, handoff99 = fmtMs(s.HandoffP50), fmtMs(s.HandoffP99)
			}
			if s.XHandoffN > 0 {
				x50, x99 = fmtMs(s.XHandoffP50), fmtMs(s.XHandoffP99)
			}
			if s.MessagesCounted {
				msgs = fmt.Sprintf("%.2f", s.MessagesPerAcq)
			}
			rows = append(rows, []string{
				r.name(s.Contender),
				fmt.Sprintf("%.0f", s.PerSecond),
				fmt.Sprintf("%.0f%%", 100*s.Utilization),
				fmtMs(s.WaitP50), fmtMs(s.WaitP99), fmtMs(s.WaitMax),
				handoff50, handoff99, x50, x99,
				fmt.Sprintf("%.1f", s.RequestsPerAcq),
				fmt.Sprintf("%.1f", s.CommandsPerAcq),
				fmt.Sprintf("%.0f", s.CPUPer1k),
				msgs,
				fmt.Sprintf("%.2f", s.Jain),
				s.verdict(),
			})
		}
		printRows(w, rows)
	}
}

// printBlocked prints the blocked point: commands per blocked waiter per
// second over the window.
func (r *Report) printBlocked(w io.Writer, p PointReport) {
	fmt.Fprintf(w, "Redis commands per blocked waiter per second over the window (INFO commandstats; the holder's commands included), PING apart:\n")
	rows := [][]string{{"contender", "window", "cmd/waiter/s", "PING/waiter/s", "all/waiter/s", "conns/client", "commands in the windows (summed over rounds, PING included)", "correctness"}}
	for _, s := range p.Summary {
		b := s.Blocked
		if b == nil {
			rows = append(rows, []string{r.name(s.Contender), "-", "-", "-", "-", "-", "-", s.verdict()})
			continue
		}
		rows = append(rows, []string{
			r.name(s.Contender),
			fmt.Sprintf("%.1fs", b.WindowS),
			fmt.Sprintf("%.3f", b.CmdPerWaiterS),
			fmt.Sprintf("%.3f", b.PingPerWaiterS),
			fmt.Sprintf("%.3f", b.CmdPerWaiterS+b.PingPerWaiterS),
			fmt.Sprintf("%.1f", b.ConnsPerClient),
			topCommands(b.Commands, 4),
			s.verdict(),
		})
	}
	printRows(w, rows)
}

// topCommands lists the n most frequent commands, "name n" each.
func topCommands(m map[string]int64, n int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
	var parts []string
	for i, k := range names {
		if i == n {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func printRows(w io.Writer, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			switch {
			case i == 0 || i == len(row)-1:
				b.WriteString(c + pad)
			default:
				b.WriteString(pad + c)
			}
			if i < len(row)-1 {
				b.WriteString("  ")
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// printFindings lists failures and how rlock compares with the best peer at
// each point. It reports whether the run failed.
func (r *Report) printFindings(w io.Writer) bool {
	failed := false
	var lines []string
	for _, p := range r.Points {
		for _, s := range p.Summary {
			who := fmt.Sprintf("%s at %s", r.name(s.Contender), p.Label)
			if s.Lost > 0 || s.Overlaps > 0 {
				failed = true
				lines = append(lines, fmt.Sprintf("FAIL  %s: mutual exclusion broken (%d lost counter updates, %d overlapping holds)", who, s.Lost, s.Overlaps))
			}
			if s.Blocked != nil && s.Blocked.Early > 0 {
				failed = true
				lines = append(lines, fmt.Sprintf("FAIL  %s: %d waiter(s) got the lock while the bench still held it (summed over rounds)", who, s.Blocked.Early))
			}
			if s.Stuck > 0 {
				known := slices.Contains(r.knownStuck(), s.Contender)
				tag := "FAIL "
				if known {
					tag = "KNOWN"
				} else {
					failed = true
				}
				lines = append(lines, fmt.Sprintf("%s %s: %d waiter(s) stuck in Lock while the lock stayed free (summed over rounds)", tag, who, s.Stuck))
			}
			if s.Errors > 0 {
				lines = append(lines, fmt.Sprintf("WARN  %s: %d error(s), e.g. %s", who, s.Errors, s.ErrorMsg))
			}
			if s.DrainCut > 0 || s.Timeouts > 0 {
				lines = append(lines, fmt.Sprintf("WARN  %s: %d wait(s) cut at the drain limit, %d hit the %v wait bound", who, s.DrainCut, s.Timeouts, r.Settings["wait"]))
			}
		}
	}
	fmt.Fprintln(w)
	if len(lines) == 0 {
		fmt.Fprintln(w, "Findings: every contender kept its counters exact, never overlapped, and left no waiter stuck.")
	} else {
		fmt.Fprintln(w, "Findings:")
		for _, l := range lines {
			fmt.Fprintln(w, "  "+l)
		}
	}
	r.printVersus(w)
	r.printFloorComparison(w)
	r.printIssueSummary(w)
	r.printClusterSummary(w)
	r.printEntitySummary(w)
	r.printLosses(w)
	return failed
}

func (r *Report) knownStuck() []string {
	s, _ := r.Settings["known_stuck"].([]string)
	return s
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// fmtMs formats milliseconds with about three significant digits.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
	default:
		return strconv.FormatFloat(v*1000, 'f', 0, 64) + "µs"
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
