package main

import (
	"fmt"
	"io"
	"strings"
)

// printClusterSummary prints what the cluster points are for: how the
// distinct-locks throughput scales from 1 to 3 masters, what a cluster
// costs a hot lock's hand-offs against the bench's own server, and the
// cluster bus's publish messages per acquisition (the goal for rlock with
// sharded pub/sub: 0).
func (r *Report) printClusterSummary(w io.Writer) {
	find := func(scenario, target string, locks int) *PointReport {
		for i := range r.Points {
			if p := &r.Points[i]; p.Scenario == scenario && p.Target == target && (locks == 0 || p.Locks == locks) {
				return p
			}
		}
		return nil
	}
	hotOwn, hot3 := find("cluster-hot", targetOwn, 0), find("cluster-hot", targetCluster3, 0)
	var lockCounts []int
	for _, p := range r.Points {
		if p.Scenario == "cluster-locks" && p.Target == targetCluster3 {
			lockCounts = append(lockCounts, p.Locks)
		}
	}
	if len(lockCounts) == 0 && hot3 == nil {
		return
	}
	fmt.Fprintln(w, "\nRedis Cluster (medians over the rounds; every Client its own worker process; 3m/1m is the ratio of the medians, by round the ratio within each round):")
	for _, locks := range lockCounts {
		locks1, locks3, locksOwn := find("cluster-locks", targetCluster1, locks), find("cluster-locks", targetCluster3, locks), find("cluster-locks", targetOwn, locks)
		if locks1 == nil {
			continue
		}
		fmt.Fprintf(w, "distinct locks, %d goroutine(s) per lock (%s):\n", locks3.Goroutines/locks, shape(locks3))
		rows := [][]string{{"contender", "standalone acq/s", "1m acq/s", "3m acq/s", "3m/1m", "3m/1m by round", "3m/standalone", "busiest node CPU standalone/1m/3m", "cmd/acq 1m/3m", "correctness"}}
		for _, c := range r.Contenders {
			s1, s3 := summaryOf(locks1, c.Slug), summaryOf(locks3, c.Slug)
			if s1 == nil || s3 == nil {
				continue
			}
			own, ownCPU, ownRatio := "-", "-", "-"
			so := summaryOf(locksOwn, c.Slug)
			if so != nil {
				own, ownCPU, ownRatio = fmt.Sprintf("%.0f", so.PerSecond), fmt.Sprintf("%.0f%%", 100*so.BusiestNodeCPUShare), fmt.Sprintf("%.2fx", ratio(s3.PerSecond, so.PerSecond))
			}
			rows = append(rows, []string{r.name(c.Slug), own, fmt.Sprintf("%.0f", s1.PerSecond), fmt.Sprintf("%.0f", s3.PerSecond),
				fmt.Sprintf("%.2fx", ratio(s3.PerSecond, s1.PerSecond)), byRound(locks3, locks1, c.Slug, func(x Result) float64 { return x.PerSecond }),
				ownRatio,
				fmt.Sprintf("%s/%.0f%%/%.0f%%", ownCPU, 100*s1.BusiestNodeCPUShare, 100*s3.BusiestNodeCPUShare),
				fmt.Sprintf("%.1f/%.1f", s1.CommandsPerAcq, s3.CommandsPerAcq), worst(so, s1, s3)})
		}
		printRows(w, rows)
	}
	if hotOwn != nil && hot3 != nil {
		fmt.Fprintf(w, "one hot lock, standalone vs 3 masters (%s):\n", shape(hot3))
		rows := [][]string{{"contender", "standalone acq/s", "3m acq/s", "3m/standalone", "x-client p50 standalone", "3m", "ratio", "x-client p99 standalone", "3m", "ratio", "samples 3m", "correctness"}}
		for _, c := range r.Contenders {
			so, s3 := summaryOf(hotOwn, c.Slug), summaryOf(hot3, c.Slug)
			if s3 == nil {
				continue
			}
			if so == nil && c.Slug == "rlock-classic" {
				so = summaryOf(hotOwn, "rlock") // the same lock on a standalone server
			}
			if so == nil {
				continue
			}
			name := r.name(c.Slug)
			if so.Contender != c.Slug {
				name += " (standalone: rlock.Mutex)"
			}
			rows = append(rows, []string{name, fmt.Sprintf("%.0f", so.PerSecond), fmt.Sprintf("%.0f", s3.PerSecond), fmt.Sprintf("%.2fx", ratio(s3.PerSecond, so.PerSecond)),
				fmtMs(so.XHandoffP50), fmtMs(s3.XHandoffP50), fmt.Sprintf("%.2fx", ratio(s3.XHandoffP50, so.XHandoffP50)),
				fmtMs(so.XHandoffP99), fmtMs(s3.XHandoffP99), fmt.Sprintf("%.2fx", ratio(s3.XHandoffP99, so.XHandoffP99)),
				fmt.Sprint(s3.XHandoffN), worst(so, s3)})
		}
		printRows(w, rows)
	}

	fmt.Fprintln(w, "cluster bus: publish messages the nodes sent each other (CLUSTER INFO, summed over the nodes), per acquisition, beside the PUBLISH/SPUBLISH commands Redis ran and the messages the clients received:")
	rows := [][]string{{"point", "contender", "bus publish/acq", "bus publishshard/acq", "PUBLISH/acq", "SPUBLISH/acq", "msg received/acq"}}
	goalMet, goalSeen := true, false
	for _, p := range r.Points {
		if !isClusterPoint(p.Point) || p.Target == targetOwn {
			continue
		}
		for _, s := range p.Summary {
			if !s.BusCounted {
				continue
			}
			msgs := "-"
			if s.MessagesCounted {
				msgs = fmt.Sprintf("%.3f", s.MessagesPerAcq)
			}
			rows = append(rows, []string{p.Label, r.name(s.Contender), fmt.Sprintf("%.3f", s.BusPublishPerAcq), fmt.Sprintf("%.3f", s.BusPublishShPerAcq),
				fmt.Sprintf("%.3f", s.PublishPerAcq), fmt.Sprintf("%.3f", s.SPublishPerAcq), msgs})
			if s.Contender == "rlock" {
				goalSeen = true
				// Summed, not the median: one message in any round misses it.
				for _, x := range p.Rounds {
					if x.Contender == "rlock" && x.BusPublish+x.BusPublishShard > 0 {
						goalMet = false
					}
				}
			}
		}
	}
	if len(rows) > 1 {
		printRows(w, rows)
	}
	if goalSeen {
		verdict := "met: 0 in every round at every cluster point"
		if !goalMet {
			verdict = "MISSED: some round of some cluster point sent publish messages over the bus"
		}
		fmt.Fprintf(w, "goal, rlock.Mutex with sharded pub/sub (the default on a cluster): 0 cluster-bus publish messages per acquisition: %s\n", verdict)
	}
}

// shape names a cluster point's load without its target.
func shape(p *PointReport) string {
	return fmt.Sprintf("%d worker processes with one Client each, %d goroutines in all, %d lock(s), hold %s", p.Workers, p.Goroutines, p.Locks, fmtHold(p.Hold))
}

// summaryOf returns contender slug's medians at p, or nil.
func summaryOf(p *PointReport, slug string) *Result {
	if p == nil {
		return nil
	}
	for i := range p.Summary {
		if p.Summary[i].Contender == slug {
			return &p.Summary[i]
		}
	}
	return nil
}

// byRound lists, round by round, contender slug's figure f at a over the
// same at b.
func byRound(a, b *PointReport, slug string, f func(Result) float64) string {
	at := func(p *PointReport, round int) *Result {
		for i := range p.Rounds {
			if x := &p.Rounds[i]; x.Contender == slug && x.Round == round {
				return x
			}
		}
		return nil
	}
	var parts []string
	for _, x := range a.Rounds {
		if x.Contender != slug {
			continue
		}
		if y := at(b, x.Round); y != nil {
			parts = append(parts, fmt.Sprintf("%.2f", ratio(f(x), f(*y))))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// worst is the correctness of two points together: "ok" or what failed.
func worst(rs ...*Result) string {
	var bad []string
	for _, s := range rs {
		if s != nil {
			if v := s.verdict(); v != "ok" {
				bad = append(bad, v)
			}
		}
	}
	if len(bad) == 0 {
		return "ok"
	}
	return strings.Join(bad, "; ")
}
