package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// The comparisons printed after the tables. A peer is any contender but
// relock's own (rlock, the semaphore, rlock-classic, rlock-functions); a peer that failed at a point
// (stuck waiters, errors, broken exclusion) or acquired nothing is left out
// there.

// Goals of issue #10 for hand-offs between processes, as multiples of the
// pub/sub floor.
const (
	goalHandoffP50 = 1.2
	goalHandoffP99 = 3.0
	// minHandoffSamples is the fewest hand-offs (median over the rounds) a
	// peer needs to be named the fastest-handing peer of the summary.
	minHandoffSamples = 20
)

func isOwn(slug string) bool {
	return slug == "rlock" || slug == "semaphore" || slug == "rlock-classic" || slug == "rlock-functions"
}

// pointView is a point's medians sorted out for the comparisons.
type pointView struct {
	mine, sem                   *Result // nil when not run
	best, cheapestCPU, fewestCm *Result // among the peers that did not fail; nil if none
	fewestReq                   *Result
}

func viewOf(p PointReport) pointView {
	var v pointView
	for i := range p.Summary {
		s := &p.Summary[i]
		switch {
		case s.Contender == "rlock":
			v.mine = s
			continue
		case s.Contender == "semaphore":
			v.sem = s
			continue
		case isOwn(s.Contender), s.failed():
			continue
		}
		if p.Scenario == "blocked" {
			// Cheapest by every command a blocked waiter costs.
			if s.Blocked != nil && (v.cheapestCPU == nil || blockedAll(s) < blockedAll(v.cheapestCPU)) {
				v.cheapestCPU = s
			}
			continue
		}
		if s.Acquisitions == 0 {
			continue
		}
		if v.best == nil || s.PerSecond > v.best.PerSecond {
			v.best = s
		}
		if v.cheapestCPU == nil || s.CPUPer1k < v.cheapestCPU.CPUPer1k {
			v.cheapestCPU = s
		}
		if v.fewestCm == nil || s.CommandsPerAcq < v.fewestCm.CommandsPerAcq {
			v.fewestCm = s
		}
		if v.fewestReq == nil || s.RequestsPerAcq < v.fewestReq.RequestsPerAcq {
			v.fewestReq = s
		}
	}
	return v
}

func blockedAll(s *Result) float64 {
	if s == nil || s.Blocked == nil {
		return 0
	}
	return s.Blocked.CmdPerWaiterS + s.Blocked.PingPerWaiterS
}

// printVersus compares rlock with the best peer at each point, on
// throughput and requests per acquisition, and gives the semaphore's ratio
// to the same peer; fairness is shown because it explains most of the
// throughput gaps.
func (r *Report) printVersus(w io.Writer) {
	fmt.Fprintln(w, "\nrlock.Mutex and the semaphore against the best peer that did not fail at each point (medians; jain = fairness):")
	for _, p := range r.Points {
		v := viewOf(p)
		if p.Scenario == "blocked" || v.best == nil || (v.mine == nil && v.sem == nil) {
			continue
		}
		line := fmt.Sprintf("  %-34s", p.Label)
		if m := v.mine; m != nil {
			rate := "wins "
			if v.best.PerSecond > m.PerSecond {
				rate = "LOSES"
			}
			req := "fewest"
			if v.fewestReq.RequestsPerAcq < m.RequestsPerAcq {
				req = "more than " + r.name(v.fewestReq.Contender)
			}
			line += fmt.Sprintf(" acq/s %s %6.0f vs %6.0f %-16s (x%.2f, jain %.2f vs %.2f); req/acq %.1f vs %.1f (%s)",
				rate, m.PerSecond, v.best.PerSecond, r.name(v.best.Contender), ratio(m.PerSecond, v.best.PerSecond),
				m.Jain, v.best.Jain, m.RequestsPerAcq, v.fewestReq.RequestsPerAcq, req)
		} else {
			line += fmt.Sprintf(" best peer %6.0f %-16s", v.best.PerSecond, r.name(v.best.Contender))
		}
		if s := v.sem; s != nil {
			line += fmt.Sprintf("; semaphore %.0f (x%.2f)", s.PerSecond, ratio(s.PerSecond, v.best.PerSecond))
		}
		fmt.Fprintln(w, line)
	}
}

// floorPoints are the points whose hand-offs between Clients are compared
// with the pub/sub floor.
func floorPoint(p PointReport) bool {
	return p.Scenario == "handoff-xproc" || p.Scenario == "fleet" || p.Scenario == "fleet-inproc"
}

// printFloorComparison gives every contender's hand-offs between Clients as
// multiples of the pub/sub floor, and how many followed a worker's last
// acquisition of the run (XHandoffEndN) with the p99 of the others.
func (r *Report) printFloorComparison(w io.Writer) {
	_, _, f50, f99 := r.floors()
	if f50 == 0 {
		return
	}
	fmt.Fprintf(w, "\nHand-offs between Clients against the pub/sub floor (p50 %s, p99 %s); goal for rlock between processes after an idle hold (handoff-xproc): p50 <= %.1fx, p99 <= %.0fx:\n",
		fmtMs(f50), fmtMs(f99), goalHandoffP50, goalHandoffP99)
	rows := [][]string{{"point", "contender", "x-client p50", "x floor", "p99", "x floor", "samples", "run ends", "p99 w/o ends", "between"}}
	for _, p := range r.Points {
		if !floorPoint(p) {
			continue
		}
		where := "processes"
		if !p.acrossProcesses() {
			where = "Clients of 1 process"
		}
		for _, s := range p.Summary {
			if s.XHandoffN == 0 {
				rows = append(rows, []string{p.Label, r.name(s.Contender), "-", "-", "-", "-", "0", "-", "-", where})
				continue
			}
			rows = append(rows, []string{p.Label, r.name(s.Contender),
				fmtMs(s.XHandoffP50), fmt.Sprintf("%.2fx", ratio(s.XHandoffP50, f50)),
				fmtMs(s.XHandoffP99), fmt.Sprintf("%.2fx", ratio(s.XHandoffP99, f99)),
				fmt.Sprint(s.XHandoffN), fmt.Sprint(s.XHandoffEndN), fmtMs(s.XHandoffMidP99), where})
		}
	}
	if len(rows) > 1 {
		printRows(w, rows)
	}
}

// printIssueSummary prints the figures issue #10 is stated against.
func (r *Report) printIssueSummary(w io.Writer) {
	r.printThroughputSummary(w)
	r.printHandoffSummary(w)
	r.printBlockedSummary(w)
}

// printThroughputSummary prints the fleet and hand-off points' throughput,
// commands and Redis CPU against the best and cheapest peers.
func (r *Report) printThroughputSummary(w io.Writer) {
	rows := [][]string{{"point", "rlock acq/s", "best peer", "acq/s", "rlock x", "sem x", "rlock jain", "cmd/acq rlock", "fewest peer", "cpu/1k rlock", "cheapest peer"}}
	for _, p := range r.Points {
		if p.Scenario != "fleet" && p.Scenario != "fleet-inproc" && p.Scenario != "handoff-xproc" {
			continue
		}
		v := viewOf(p)
		if v.mine == nil || v.best == nil {
			continue
		}
		sem := "-"
		if v.sem != nil {
			sem = fmt.Sprintf("%.2fx", ratio(v.sem.PerSecond, v.best.PerSecond))
		}
		rows = append(rows, []string{p.Label,
			fmt.Sprintf("%.0f", v.mine.PerSecond), r.name(v.best.Contender), fmt.Sprintf("%.0f", v.best.PerSecond),
			fmt.Sprintf("%.2fx", ratio(v.mine.PerSecond, v.best.PerSecond)), sem, fmt.Sprintf("%.2f", v.mine.Jain),
			fmt.Sprintf("%.1f", v.mine.CommandsPerAcq), fmt.Sprintf("%.1f %s", v.fewestCm.CommandsPerAcq, r.name(v.fewestCm.Contender)),
			fmt.Sprintf("%.0f", v.mine.CPUPer1k), fmt.Sprintf("%.0f %s", v.cheapestCPU.CPUPer1k, r.name(v.cheapestCPU.Contender)),
		})
	}
	if len(rows) > 1 || slices.ContainsFunc(r.Points, func(p PointReport) bool { return p.Scenario == "handoff-xproc" || p.Scenario == "blocked" }) {
		fmt.Fprintln(w, "\nSummary (issue #10; medians over the rounds; best peer = fastest peer that did not fail there, cheapest = least Redis CPU per acquisition):")
	}
	if len(rows) > 1 {
		printRows(w, rows)
	}
}

// printHandoffSummary prints the hand-off between processes against the
// pub/sub floor and the floors after a turn's idle.
func (r *Report) printHandoffSummary(w io.Writer) {
	_, _, f50, f99 := r.floors()
	for _, p := range r.Points {
		if p.Scenario != "handoff-xproc" || f50 == 0 {
			continue
		}
		fmt.Fprintf(w, "hand-off between processes (%s) vs pub/sub floor p50 %s / p99 %s:", p.Label, fmtMs(f50), fmtMs(f99))
		var parts []string
		var bestPeer *Result
		for i := range p.Summary {
			s := &p.Summary[i]
			if isOwn(s.Contender) {
				if s.XHandoffN > 0 {
					parts = append(parts, fmt.Sprintf("%s %s (%.2fx) / %s (%.2fx)", r.name(s.Contender),
						fmtMs(s.XHandoffP50), ratio(s.XHandoffP50, f50), fmtMs(s.XHandoffP99), ratio(s.XHandoffP99, f99)))
				}
			} else if !s.failed() && s.XHandoffN >= minHandoffSamples && (bestPeer == nil || s.XHandoffP50 < bestPeer.XHandoffP50) {
				bestPeer = s
			}
		}
		if bestPeer != nil {
			parts = append(parts, fmt.Sprintf("fastest-handing peer %s %s (%.2fx) / %s (%.2fx)", r.name(bestPeer.Contender),
				fmtMs(bestPeer.XHandoffP50), ratio(bestPeer.XHandoffP50, f50), fmtMs(bestPeer.XHandoffP99), ratio(bestPeer.XHandoffP99, f99)))
		}
		fmt.Fprintf(w, " %s; goal rlock <= %.1fx / %.0fx\n", strings.Join(parts, "; "), goalHandoffP50, goalHandoffP99)
		for _, by := range []floorBy{byPublish, byScript, byHandoff} {
			t50, t99 := r.turnFloor(by)
			if t50 <= 0 {
				continue
			}
			what := [...]string{byPublish: "the floor after a turn's idle", byScript: "the script floor after a turn's idle",
				byHandoff: "the hand-off floor after a turn's idle"}[by]
			if by == byHandoff {
				// The least any safe hand-off costs, against the floors the
				// goal is stated against: what this alone takes of the goal
				// is gone before either Client does any work.
				p50, p99 := r.turnFloor(byPublish)
				fmt.Fprintf(w, "  the hand-off floor itself (the least a safe hand-off by a script costs, after a turn's idle) p50 %s / p99 %s: %.2fx / %.2fx the pub/sub floor, %.2fx / %.2fx the floor after a turn's idle (goal for rlock %.1fx / %.0fx)\n",
					fmtMs(t50), fmtMs(t99), ratio(t50, f50), ratio(t99, f99), ratio(t50, p50), ratio(t99, p99), goalHandoffP50, goalHandoffP99)
			}
			for i := range p.Summary {
				if s := &p.Summary[i]; isOwn(s.Contender) && s.XHandoffN > 0 {
					fmt.Fprintf(w, "  against %s (p50 %s / p99 %s): %s %.2fx / %.2fx\n", what, fmtMs(t50), fmtMs(t99),
						r.name(s.Contender), ratio(s.XHandoffP50, t50), ratio(s.XHandoffP99, t99))
				}
			}
		}
	}
}

// printBlockedSummary prints what a blocked waiter costs Redis.
func (r *Report) printBlockedSummary(w io.Writer) {
	for _, p := range r.Points {
		if p.Scenario != "blocked" {
			continue
		}
		v := viewOf(p)
		fmt.Fprintf(w, "blocked waiter (%s), Redis commands per waiter per second, other + PING:", p.Label)
		var parts []string
		for _, s := range []*Result{v.mine, v.sem, v.cheapestCPU} {
			if s == nil || s.Blocked == nil {
				continue
			}
			who := r.name(s.Contender)
			if s == v.cheapestCPU {
				who = "cheapest peer " + who
			}
			parts = append(parts, fmt.Sprintf("%s %.3f + %.3f", who, s.Blocked.CmdPerWaiterS, s.Blocked.PingPerWaiterS))
		}
		fmt.Fprintf(w, " %s\n", strings.Join(parts, "; "))
	}
}

// printLosses lists, automatically, every point where rlock or the
// semaphore is slower than the best peer or costs Redis more CPU per
// acquisition than the cheapest peer; where a blocked waiter costs more
// commands than the cheapest peer's; and where rlock misses the hand-off
// goals against the pub/sub floor.
func (r *Report) printLosses(w io.Writer) {
	var lines []string
	_, _, f50, f99 := r.floors()
	for _, p := range r.Points {
		v := viewOf(p)
		for _, s := range []*Result{v.mine, v.sem} {
			if s == nil {
				continue
			}
			who := fmt.Sprintf("%s at %s", r.name(s.Contender), p.Label)
			if p.Scenario == "blocked" {
				if c := v.cheapestCPU; c != nil && s.Blocked != nil && blockedAll(s) > blockedAll(c) {
					lines = append(lines, fmt.Sprintf("%s: %.3f commands per waiter per second (%.3f + %.3f PING) vs %.3f (%.3f + %.3f PING) for %s",
						who, blockedAll(s), s.Blocked.CmdPerWaiterS, s.Blocked.PingPerWaiterS,
						blockedAll(c), c.Blocked.CmdPerWaiterS, c.Blocked.PingPerWaiterS, r.name(c.Contender)))
				}
				continue
			}
			if s.failed() {
				lines = append(lines, fmt.Sprintf("%s: failed (%s)", who, s.verdict()))
			}
			if b := v.best; b != nil && s.PerSecond < b.PerSecond {
				lines = append(lines, fmt.Sprintf("%s: x%.2f the best peer (%.0f vs %.0f acq/s, %s)",
					who, ratio(s.PerSecond, b.PerSecond), s.PerSecond, b.PerSecond, r.name(b.Contender)))
			}
			if c := v.cheapestCPU; c != nil && s.CPUPer1k > c.CPUPer1k {
				lines = append(lines, fmt.Sprintf("%s: Redis CPU %.0f vs %.0f ms per 1k acquisitions (%s; cmd/acq %.1f vs %.1f)",
					who, s.CPUPer1k, c.CPUPer1k, r.name(c.Contender), s.CommandsPerAcq, c.CommandsPerAcq))
			}
			if p.Scenario == "handoff-xproc" && s.Contender == "rlock" && f50 > 0 && s.XHandoffN > 0 {
				if x := ratio(s.XHandoffP50, f50); x > goalHandoffP50 {
					lines = append(lines, fmt.Sprintf("%s: hand-off p50 between processes %s = %.2fx the pub/sub floor (goal <= %.1fx)", who, fmtMs(s.XHandoffP50), x, goalHandoffP50))
				}
				if x := ratio(s.XHandoffP99, f99); x > goalHandoffP99 {
					lines = append(lines, fmt.Sprintf("%s: hand-off p99 between processes %s = %.2fx the pub/sub floor (goal <= %.0fx)", who, fmtMs(s.XHandoffP99), x, goalHandoffP99))
				}
			}
		}
	}
	fmt.Fprintln(w, "\nHonest losses (rlock or the semaphore slower than the best peer, costlier in Redis CPU than the cheapest peer, a blocked waiter costlier than the cheapest peer's, or rlock's hand-off past its goal against the pub/sub floor):")
	if len(lines) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
}
