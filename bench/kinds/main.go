// Command kinds benchmarks the lock kinds beyond the Mutex (issue #13) side
// by side with the closest peers, in one run: the RWMutex under a 90%-read
// load, the Mutex's strict FIFO mode against its default (cohort turns),
// MultiLock over overlapping sets, and the quorum lock over 5 independent
// masters against redsync with 5 pools.
//
// Every point runs in one process: several Clients (each with its own
// connections, as separate processes would have) with a few goroutines
// each, so hand-offs between Clients go through Redis. Contenders run
// interleaved within each round (the order rotates), and the tables give the
// median of the rounds. In-process counters check every acquisition: a
// writer (or an exclusive holder) overlapping anyone, or a reader
// overlapping a writer, is a violation, and the run exits 1.
//
// Usage (from bench/):
//
//	go run ./kinds [-quick] [-rounds 3] [-duration 2s] [-points rw,fifo,multi,quorum]
//
// Without REDIS_ADDR it starts throwaway redis-servers on free loopback
// ports (the quorum point always starts its own five).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

type settings struct {
	rounds   int
	duration time.Duration
	wait     time.Duration
	points   []string
	out      string
}

var allPoints = []string{"rw", "fifo", "multi", "quorum"}

func main() {
	os.Exit(run())
}

func run() int {
	var s settings
	var quick bool
	var points string
	flag.BoolVar(&quick, "quick", false, "one round of 500ms runs; explicit flags still win")
	flag.IntVar(&s.rounds, "rounds", 3, "rounds; every contender runs every point once per round, the tables give medians")
	flag.DurationVar(&s.duration, "duration", 2*time.Second, "how long each run starts acquisitions; open waits then drain")
	flag.DurationVar(&s.wait, "wait", 30*time.Second, "bound of every acquisition")
	flag.StringVar(&points, "points", strings.Join(allPoints, ","), "comma-separated points: "+strings.Join(allPoints, ", "))
	flag.StringVar(&s.out, "out", "results", "directory for kinds.json")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if quick {
		if !set["rounds"] {
			s.rounds = 1
		}
		if !set["duration"] {
			s.duration = 500 * time.Millisecond
		}
	}
	for _, p := range strings.Split(points, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(allPoints, p) {
			fmt.Fprintf(os.Stderr, "kinds: unknown point %q (have %s)\n", p, strings.Join(allPoints, ", "))
			return 2
		}
		s.points = append(s.points, p)
	}
	ctx := context.Background()
	start := time.Now()
	var all []pointResult
	failed := false
	for _, name := range s.points {
		pt := pointByName(name)
		servers, err := startServers(ctx, pt.servers)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kinds: %s: %v\n", name, err)
			return 2
		}
		res, err := runPoint(ctx, s, pt, servers)
		for _, srv := range servers {
			_ = srv.Close()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kinds: %s: %v\n", name, err)
			return 2
		}
		report(os.Stdout, res)
		all = append(all, res)
		for _, c := range res.Contenders {
			failed = failed || c.Violations > 0 || c.Errors > 0
		}
	}
	b, _ := json.MarshalIndent(map[string]any{
		"date": start.UTC().Format(time.RFC3339), "relock": treeState(),
		"rounds": s.rounds, "duration": s.duration.String(), "points": all,
	}, "", "  ")
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "kinds: %v\n", err)
		return 2
	}
	if err := os.WriteFile(filepath.Join(s.out, "kinds.json"), b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kinds: %v\n", err)
		return 2
	}
	fmt.Printf("\nwrote %s (%s)\n", filepath.Join(s.out, "kinds.json"), time.Since(start).Round(time.Second))
	if failed {
		fmt.Println("FAILED: a contender let holders overlap or failed acquisitions (see the tables)")
		return 1
	}
	return 0
}

// startServers starts n throwaway servers; with REDIS_ADDR set and n == 1 it
// uses that one instead.
func startServers(ctx context.Context, n int) ([]*redistest.Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" && n == 1 {
		srv, err := redistest.Attach(ctx, addr)
		if err != nil {
			return nil, err
		}
		return []*redistest.Server{srv}, nil
	}
	return redistest.StartServers(ctx, n)
}

// treeState names the relock commit under test (the bench runs from bench/),
// and whether the tree had uncommitted changes.
func treeState() string {
	out, err := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(commit unknown)"
	}
	state := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		state += " + uncommitted changes"
	}
	return state
}
