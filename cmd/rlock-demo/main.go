// Command rlock-demo compares waiting for a Redis lock on pub/sub with
// spinning on it.
//
// It runs the same two phases against one Redis, first with rlock.Mutex,
// whose waiters sleep until an unlock message wakes them, then with a plain
// spin lock (SET NX PX, retried with exponential backoff):
//
//   - hot lock: many goroutines on several clients fight for a single lock
//     and increment a shared counter inside it. The demo prints throughput,
//     wait times, how long the lock sits idle between holders, the Redis
//     requests the clients send per acquisition, whether the counter is
//     exact, and how evenly the goroutines were served.
//   - blocked waiters: one goroutine holds the lock for a while and all the
//     others block on it. The demo prints the requests each blocked waiter
//     sends per second, how soon after the holder calls Unlock the first
//     waiter has the lock, and how long it takes until every waiter has had
//     it once.
//
// Requests are counted by a wrapper around each rueidis.Client, so a Lua
// script call counts once; INFO commandstats, which also counts the commands
// run inside scripts, is shown as a secondary figure.
//
// Without REDIS_ADDR it starts a throwaway redis-server; with REDIS_ADDR
// (host:port) it uses that server under a unique key prefix.
//
// Usage:
//
//	go run ./cmd/rlock-demo [-duration 3s] [-block 2s] [-hold 1ms] [-clients 3] [-goroutines 16] [-v]
//
// It exits 1 if either counter lost an update or anything failed, 130 when
// interrupted.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// lockName is the one lock every goroutine fights over.
const lockName = "hot"

func main() { os.Exit(run()) }

func run() int {
	var s settings
	flag.DurationVar(&s.duration, "duration", 3*time.Second, "how long each contender runs the hot lock")
	flag.DurationVar(&s.block, "block", 2*time.Second, "how long the holder keeps the lock while the others block on it")
	flag.DurationVar(&s.hold, "hold", time.Millisecond, "time spent inside the lock, besides the counter update")
	flag.IntVar(&s.clients, "clients", 3, "Redis clients per contender")
	flag.IntVar(&s.goroutines, "goroutines", 16, "goroutines per client")
	verbose := flag.Bool("v", false, "also list each hot run's Redis requests and commands by name")
	flag.Parse()
	if s.duration <= 0 || s.block <= 0 || s.hold < 0 || s.clients < 1 || s.goroutines < 1 || s.clients*s.goroutines < 2 {
		fmt.Fprintln(os.Stderr, "rlock-demo: -duration and -block must be positive, -hold not negative, -clients and -goroutines at least 1, and at least 2 goroutines in all")
		return 2
	}

	// Ctrl-C cancels ctx; the deferred clean-ups still run, so a throwaway
	// server is never left behind.
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	baseline := runtime.NumGoroutine()
	defer func() {
		stopSignals()
		checkGoroutines(baseline)
	}()

	srv, shared, err := openRedis(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlock-demo:", err)
		return exitCode(ctx)
	}
	defer srv.Close()
	s.prefix = "rlock-demo"
	if shared {
		// A shared server may hold anything, and pub/sub channels are global:
		// a fresh prefix keeps this run away from other programs and runs.
		s.prefix += ":" + rand.Text()[:10]
		fmt.Printf("redis: %s from REDIS_ADDR, keys under %q\n", srv.Addr(), s.prefix+":")
		fmt.Println("note: command counts include any other traffic on that server")
		defer cleanUp(srv, s.prefix)
	} else {
		fmt.Printf("redis: throwaway redis-server at %s\n", srv.Addr())
	}
	fmt.Printf("workload: %d clients x %d goroutines on one lock; inside it GET+SET a counter and sleep %v\n",
		s.clients, s.goroutines, s.hold)
	fmt.Printf("each contender runs %v of hot lock, then %v of blocked waiters; the tables follow at the end\n\n",
		s.duration, s.block)

	var (
		hot     []*result
		blocked []*blockedResult
	)
	for _, c := range contenders(s.prefix) {
		h, b, err := runContender(ctx, srv, s, c)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "rlock-demo: interrupted")
			} else {
				fmt.Fprintf(os.Stderr, "rlock-demo: %s: %v\n", c.name, err)
			}
			return exitCode(ctx)
		}
		hot, blocked = append(hot, h), append(blocked, b)
	}

	fmt.Printf("\nHot lock, %v per contender:\n", s.duration)
	printTable(hot...)
	printHotNotes(hot[0], hot[1])
	fmt.Printf("\nBlocked waiters: one goroutine holds the lock for %v, the other %d wait for it:\n", s.block, blocked[0].waiters)
	printBlockedTable(blocked...)
	fmt.Println()
	interpret(hot[0], hot[1], blocked[0], blocked[1])
	fmt.Println()
	fmt.Println("Times are taken on this process's monotonic clock.")
	if *verbose {
		for _, r := range hot {
			fmt.Println()
			printCommands(r)
		}
	}

	failed := false
	for i := range hot {
		for _, c := range []struct {
			phase string
			lost  int64
		}{{"hot lock", hot[i].lost()}, {"blocked waiters", blocked[i].lost()}} {
			if c.lost != 0 {
				fmt.Fprintf(os.Stderr, "rlock-demo: %s lost %d updates in the %s phase: it let two holders in at once\n", hot[i].name, c.lost, c.phase)
				failed = true
			}
		}
	}
	if failed {
		return 1
	}
	return 0
}

// contenders are the two locks compared, rlock.Mutex first.
func contenders(prefix string) []contender {
	return []contender{
		{
			name: "rlock.Mutex",
			slug: "mutex",
			open: func(rc rueidis.Client, _ int) (locker, error) {
				c, err := rlock.New(rc, rlock.WithKeyPrefix(prefix))
				if err != nil {
					return nil, err
				}
				return &mutexLocker{c: c, m: c.Mutex(lockName)}, nil
			},
		},
		{
			name: fmt.Sprintf("spin SET NX (%v-%v backoff)", measure.SpinMinBackoff, measure.SpinMaxBackoff),
			slug: "spin",
			open: func(rc rueidis.Client, i int) (locker, error) {
				return &spinLock{l: measure.NewSpinLocker(rc, fmt.Sprintf("client%d", i), spinLease), key: prefix + ":spin:{" + lockName + "}"}, nil
			},
		},
	}
}

// openRedis returns the server named by REDIS_ADDR (shared is true then), or
// starts a throwaway one.
func openRedis(ctx context.Context) (srv *redistest.Server, shared bool, err error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Printf("connecting to %s (REDIS_ADDR)...\n", addr)
		srv, err := redistest.Attach(ctx, addr)
		return srv, true, err
	}
	// Checked here so that the fix is spelled out, rather than left to an
	// error from deep inside process start-up.
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, false, errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server) or set REDIS_ADDR=host:port to use a running Redis")
	}
	fmt.Println("starting a throwaway redis-server...")
	srv, err = redistest.StartServer(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("start redis-server: %w", err)
	}
	return srv, false, nil
}

// cleanUp deletes the keys this run left on a shared server, including the
// lock's own bookkeeping (fencing counter, release latches), which outlives a
// lock by design.
func cleanUp(srv *redistest.Server, prefix string) {
	rc, err := srv.Client()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlock-demo: clean-up:", err)
		return
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		e, err := rc.Do(ctx, rc.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlock-demo: clean-up:", err)
			return
		}
		if len(e.Elements) > 0 {
			if err := rc.Do(ctx, rc.B().Unlink().Key(e.Elements...).Build()).Error(); err != nil {
				fmt.Fprintln(os.Stderr, "rlock-demo: clean-up:", err)
				return
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

// exitCode is 130 (the shell's code for SIGINT) after Ctrl-C, 1 otherwise.
func exitCode(ctx context.Context) int {
	if ctx.Err() != nil {
		return 130
	}
	return 1
}

// checkGoroutines warns if goroutines outlive the demo: every client, lock
// and server must have been closed by now, and each owns goroutines.
func checkGoroutines(baseline int) {
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "rlock-demo: warning: %d goroutines still running after clean-up (expected %d):\n",
				runtime.NumGoroutine(), baseline)
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
