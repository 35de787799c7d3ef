package main

import (
	"fmt"
	"io"
	"strings"
)

// The entity points (issue #28): the common case of a lock per entity,
// "lock order-123 while processing it", where nobody else wants the lock.
// What counts there is what an uncontended Lock and Unlock cost: their
// round trips, Redis's commands and CPU. Two shapes:
//
//   - entity-new: every acquisition a lock name never used before (each
//     order locked once);
//   - entity-own: every goroutine its own name, locked again and again.
//
// each at three points, hold 0: 1 goroutine in 1 process; n goroutines on
// one Client in 1 process; n processes with one Client and one goroutine
// each (-entity-n, 16). Each goroutine has a counter slot of its own
// (Locks = Goroutines), so the exclusion check still runs, and the
// stuck-waiter monitor probes the one name each goroutine still in Lock
// waits for, however many names the run went through.

// isEntityPoint tells the points of -scenarios entity-new and entity-own.
func isEntityPoint(p Point) bool { return p.Scenario == "entity-new" || p.Scenario == "entity-own" }

// entityPoints returns the three points of scenario sc.
func entityPoints(sc string, n int) []Point {
	shapes := []struct{ workers, goroutines int }{{1, 1}, {1, n}, {n, n}}
	var pts []Point
	for _, s := range shapes {
		pts = append(pts, Point{Scenario: sc,
			Label:   fmt.Sprintf("%s %dp/%dg hold 0", sc, s.workers, s.goroutines),
			Workers: s.workers, ClientsPerWorker: 1, Goroutines: s.goroutines, Locks: s.goroutines,
			FreshNames: sc == "entity-new"})
	}
	return pts
}

// EntitySummary is one entity point in results.json: every contender's
// figures with their ratios to the best peer (throughput), the peer whose
// Lock+Unlock runs the fewest Redis commands, and the one that costs Redis
// the least CPU. Peers are as in the other comparisons: every contender but
// relock's own, left out where it failed or acquired nothing.
type EntitySummary struct {
	Point         string          `json:"point"`
	Scenario      string          `json:"scenario"`
	Processes     int             `json:"processes"`
	Goroutines    int             `json:"goroutines"`
	BestPeer      string          `json:"best_peer,omitempty"`
	FewestCmdPeer string          `json:"fewest_commands_peer,omitempty"`
	CheapestPeer  string          `json:"cheapest_cpu_peer,omitempty"`
	Contenders    []EntityFigures `json:"contenders"`
}

// EntityFigures are one contender's medians at an entity point; the x_
// ratios are 0 where the point has no such peer.
type EntityFigures struct {
	Contender      string  `json:"contender"`
	PerSecond      float64 `json:"acquisitions_per_s"`
	XBestPeer      float64 `json:"acq_per_s_x_best_peer"`
	CommandsPerAcq float64 `json:"redis_commands_per_lock_unlock"`
	XFewestCmd     float64 `json:"commands_x_fewest_peer"`
	RequestsPerAcq float64 `json:"requests_per_lock_unlock"`
	CPUPer1k       float64 `json:"redis_cpu_ms_per_1k"`
	XCheapest      float64 `json:"cpu_x_cheapest_peer"`
	Correctness    string  `json:"correctness"`
}

// entitySummaries computes the entity section of the report from the
// medians.
func (r *Report) entitySummaries() []EntitySummary {
	var out []EntitySummary
	for _, p := range r.Points {
		if !isEntityPoint(p.Point) || len(p.Summary) == 0 {
			continue
		}
		v := viewOf(p)
		e := EntitySummary{Point: p.Label, Scenario: p.Scenario, Processes: p.Workers, Goroutines: p.Goroutines}
		if v.best != nil {
			e.BestPeer, e.FewestCmdPeer, e.CheapestPeer = v.best.Contender, v.fewestCm.Contender, v.cheapestCPU.Contender
		}
		for _, s := range p.Summary {
			f := EntityFigures{Contender: s.Contender, PerSecond: s.PerSecond, CommandsPerAcq: s.CommandsPerAcq,
				RequestsPerAcq: s.RequestsPerAcq, CPUPer1k: s.CPUPer1k, Correctness: s.verdict()}
			if v.best != nil {
				f.XBestPeer = ratio(s.PerSecond, v.best.PerSecond)
				f.XFewestCmd = ratio(s.CommandsPerAcq, v.fewestCm.CommandsPerAcq)
				f.XCheapest = ratio(s.CPUPer1k, v.cheapestCPU.CPUPer1k)
			}
			e.Contenders = append(e.Contenders, f)
		}
		out = append(out, e)
	}
	return out
}

// printEntitySummary prints the entity section: every contender at every
// entity point, then rlock's and the semaphore's ratios point by point.
func (r *Report) printEntitySummary(w io.Writer) {
	if len(r.Entity) == 0 {
		return
	}
	fmt.Fprintln(w, "\nPer-entity locks, uncontended (issue #28; medians over the rounds; hold 0; x = ratio to the best peer for acq/s, to the peer with the fewest Redis commands per Lock+Unlock for cmd, to the peer with the least Redis CPU for cpu):")
	rows := [][]string{{"point", "contender", "acq/s", "x best", "cmd/acq", "x fewest", "req/acq", "cpu ms/1k", "x cheapest", "correctness"}}
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", v)
	}
	for _, e := range r.Entity {
		for _, f := range e.Contenders {
			rows = append(rows, []string{e.Point, r.name(f.Contender),
				fmt.Sprintf("%.0f", f.PerSecond), x(f.XBestPeer),
				fmt.Sprintf("%.1f", f.CommandsPerAcq), x(f.XFewestCmd),
				fmt.Sprintf("%.1f", f.RequestsPerAcq),
				fmt.Sprintf("%.1f", f.CPUPer1k), x(f.XCheapest), f.Correctness})
		}
	}
	printRows(w, rows)

	fmt.Fprintln(w, "\nrlock.Mutex / the semaphore against the peers at the entity points:")
	rows = [][]string{{"point", "acq/s rlock/sem", "best peer", "acq/s", "x best rlock/sem", "cmd/acq rlock/sem", "fewest peer", "cpu ms/1k rlock/sem", "cheapest peer"}}
	for _, e := range r.Entity {
		if e.BestPeer == "" {
			continue
		}
		mine, sem := e.figures("rlock"), e.figures("semaphore")
		best, fewest, cheapest := e.figures(e.BestPeer), e.figures(e.FewestCmdPeer), e.figures(e.CheapestPeer)
		pair := func(format string, get func(*EntityFigures) float64) string {
			var parts []string
			for _, f := range []*EntityFigures{mine, sem} {
				if f == nil {
					parts = append(parts, "-")
				} else {
					parts = append(parts, fmt.Sprintf(format, get(f)))
				}
			}
			return strings.Join(parts, " / ")
		}
		rows = append(rows, []string{e.Point,
			pair("%.0f", func(f *EntityFigures) float64 { return f.PerSecond }),
			r.name(best.Contender), fmt.Sprintf("%.0f", best.PerSecond),
			pair("%.2fx", func(f *EntityFigures) float64 { return f.XBestPeer }),
			pair("%.1f", func(f *EntityFigures) float64 { return f.CommandsPerAcq }),
			fmt.Sprintf("%.1f %s", fewest.CommandsPerAcq, r.name(fewest.Contender)),
			pair("%.1f", func(f *EntityFigures) float64 { return f.CPUPer1k }),
			fmt.Sprintf("%.1f %s", cheapest.CPUPer1k, r.name(cheapest.Contender)),
		})
	}
	if len(rows) > 1 {
		printRows(w, rows)
	}
}

// figures returns the figures of contender slug at the point, nil if it did
// not run there.
func (e EntitySummary) figures(slug string) *EntityFigures {
	for i := range e.Contenders {
		if e.Contenders[i].Contender == slug {
			return &e.Contenders[i]
		}
	}
	return nil
}
