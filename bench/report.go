package main

import (
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
	Points     []PointReport     `json:"points"`
	Figures    map[string]string `json:"figures"` // what each figure means
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
}

func newReport(cfg config, points []Point, cs []Contender) *Report {
	r := &Report{
		Started: time.Now().UTC().Format(time.RFC3339),
		Go:      runtime.Version(),
		CPUs:    runtime.NumCPU(),
		Settings: map[string]any{
			"quick": cfg.quick, "rounds": cfg.rounds, "duration": cfg.duration.String(), "wait": cfg.wait.String(),
			"stuck_after": cfg.stuckAfter.String(), "drain_limit": cfg.drainLimit.String(), "pings": cfg.pings,
			"known_stuck": cfg.knownStuck,
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

// printTable prints one block per point, one row per contender, medians.
func (r *Report) printTable(w io.Writer) {
	if len(r.Pings) > 0 {
		var p50s, p99s []float64
		for _, p := range r.Pings {
			p50s = append(p50s, p.P50)
			p99s = append(p99s, p.P99)
		}
		fmt.Fprintf(w, "Loopback floor (sequential PING round trip, median of rounds): p50 %s, p99 %s\n",
			fmtMs(medianOf(p50s)), fmtMs(medianOf(p99s)))
	}
	fmt.Fprintln(w, "Medians over the rounds; req = requests sent by the clients, cmd = commands Redis ran (Lua's inner commands count), cpu = Redis CPU ms per 1,000 acquisitions.")
	head := []string{"contender", "acq/s", "util", "wait p50", "p99", "max", "handoff p50", "p99", "req/acq", "cmd/acq", "cpu/1k", "jain", "correctness"}
	for _, p := range r.Points {
		fmt.Fprintf(w, "\n%s  (%d process(es), %d client(s), %d goroutines, %d lock(s))\n", p.Label, p.Workers, p.Clients(), p.Goroutines, p.Locks)
		rows := [][]string{head}
		for _, s := range p.Summary {
			handoff50, handoff99 := "-", "-"
			if s.HandoffN > 0 {
				handoff50, handoff99 = fmtMs(s.HandoffP50), fmtMs(s.HandoffP99)
			}
			rows = append(rows, []string{
				r.name(s.Contender),
				fmt.Sprintf("%.0f", s.PerSecond),
				fmt.Sprintf("%.0f%%", 100*s.Utilization),
				fmtMs(s.WaitP50), fmtMs(s.WaitP99), fmtMs(s.WaitMax),
				handoff50, handoff99,
				fmt.Sprintf("%.1f", s.RequestsPerAcq),
				fmt.Sprintf("%.1f", s.CommandsPerAcq),
				fmt.Sprintf("%.0f", s.CPUPer1k),
				fmt.Sprintf("%.2f", s.Jain),
				s.verdict(),
			})
		}
		printRows(w, rows)
	}
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
	return failed
}

func (r *Report) knownStuck() []string {
	s, _ := r.Settings["known_stuck"].([]string)
	return s
}

// printVersus compares rlock with the best peer at each point, on
// throughput and on requests per acquisition, leaving out peers that failed
// there (stuck waiters, errors, broken exclusion); fairness is shown because
// it explains most of the throughput gaps.
func (r *Report) printVersus(w io.Writer) {
	fmt.Fprintln(w, "\nrlock.Mutex against the best peer that did not fail at each point (medians; jain = fairness):")
	for _, p := range r.Points {
		var mine *Result
		var bestRate, bestReq *Result
		for i := range p.Summary {
			s := &p.Summary[i]
			if s.Contender == "rlock" {
				mine = s
				continue
			}
			if s.Acquisitions == 0 || s.failed() {
				continue
			}
			if bestRate == nil || s.PerSecond > bestRate.PerSecond {
				bestRate = s
			}
			if bestReq == nil || s.RequestsPerAcq < bestReq.RequestsPerAcq {
				bestReq = s
			}
		}
		if mine == nil || bestRate == nil {
			continue
		}
		rate := "wins "
		if bestRate.PerSecond > mine.PerSecond {
			rate = "LOSES"
		}
		req := "fewest"
		if bestReq.RequestsPerAcq < mine.RequestsPerAcq {
			req = "more than " + r.name(bestReq.Contender)
		}
		fmt.Fprintf(w, "  %-22s acq/s %s %6.0f vs %6.0f %-16s (x%.2f, jain %.2f vs %.2f); req/acq %.1f vs %.1f (%s)\n",
			p.Label, rate, mine.PerSecond, bestRate.PerSecond, r.name(bestRate.Contender), ratio(mine.PerSecond, bestRate.PerSecond),
			mine.Jain, bestRate.Jain, mine.RequestsPerAcq, bestReq.RequestsPerAcq, req)
	}
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
