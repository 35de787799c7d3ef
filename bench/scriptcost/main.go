// Command scriptcost takes and gives back uncontended locks of one kind, each
// on a name of its own, n times, against one Redis: a fixed workload whose
// cost Redis can count exactly when it runs under a profiler.
//
// Wall-clock timings of a Lua script on a shared 2-core machine move by more
// than a script change does; the number of instructions Redis executes for
// the same calls does not. docs/benchmarks.md ("Instructions per
// operation") runs it so:
//
//	valgrind --tool=callgrind --callgrind-out-file=cg.out redis-server --port 6399 --save '' &
//	go run ./scriptcost -addr 127.0.0.1:6399 -kind mutex -n 1000
//	redis-cli -p 6399 shutdown nosave
//	callgrind_annotate --inclusive=yes cg.out | head
//
// and divides the program's total by n. Each build is measured the same way.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "Redis address (loopback)")
	n := flag.Int("n", 1000, "operations: each takes and gives back one lock")
	kind := flag.String("kind", "mutex", "mutex (Lock+Unlock), read (RLock+RUnlock), write (RWMutex Lock+Unlock), sem (one-permit Acquire+Release), spin (the bench's SET NX PX lock with a compare-and-delete release, for comparison) or handoff (a Mutex held, a second Client's Lock queued behind it, the Unlock handing it over, the second Unlock)")
	flag.Parse()
	if err := run(*addr, *n, *kind); err != nil {
		fmt.Fprintln(os.Stderr, "scriptcost:", err)
		os.Exit(1)
	}
}

func run(addr string, n int, kind string) error {
	op, ok := ops[kind]
	if !ok {
		return fmt.Errorf("unknown -kind %q: want mutex, read, write, sem, spin or handoff", kind)
	}
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	c, err := rlock.New(rc)
	if err != nil {
		return err
	}
	defer c.Close()
	spin = measure.NewSpinLocker(rc, "scriptcost", 30*time.Second)
	orc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer orc.Close()
	if other, err = rlock.New(orc); err != nil {
		return err
	}
	defer other.Close()
	for i := 0; i < n; i++ {
		if err := op(ctx, c, fmt.Sprintf("scriptcost-%d", i)); err != nil {
			return err
		}
	}
	if looks > 0 {
		fmt.Printf("%d Inspect calls\n", looks)
	}
	return nil
}

// spin is the peer the bench measures rlock against (see internal/measure).
var spin *measure.SpinLocker

// other is a second Client, the waiter of the handoff kind; looks counts
// its Inspect calls.
var (
	other *rlock.Client
	looks int
)

var ops = map[string]func(ctx context.Context, c *rlock.Client, name string) error{
	"mutex": func(ctx context.Context, c *rlock.Client, name string) error {
		m := c.Mutex(name)
		lc, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return m.Unlock(lc)
	},
	"read": func(ctx context.Context, c *rlock.Client, name string) error {
		m := c.RWMutex(name)
		lc, err := m.RLock(ctx)
		if err != nil {
			return err
		}
		return m.RUnlock(lc)
	},
	"write": func(ctx context.Context, c *rlock.Client, name string) error {
		m := c.RWMutex(name)
		lc, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return m.Unlock(lc)
	},
	"sem": func(ctx context.Context, c *rlock.Client, name string) error {
		s := semaphore.New(c, name, semaphore.WithLimit(1))
		pc, err := s.Acquire(ctx, 1)
		if err != nil {
			return err
		}
		return s.Release(pc)
	},
	"handoff": func(ctx context.Context, c *rlock.Client, name string) error {
		m := c.Mutex(name)
		held, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		got := make(chan error, 1)
		go func() {
			w := other.Mutex(name)
			lc, err := w.Lock(ctx)
			if err == nil {
				err = w.Unlock(lc)
			}
			got <- err
		}()
		// Released once the waiter is queued, so that the Unlock hands over
		// (each look is an Inspect script; their number is printed).
		for {
			time.Sleep(time.Millisecond)
			looks++
			info, err := m.Inspect(ctx)
			if err != nil {
				return err
			}
			if info.Queued > 0 {
				break
			}
		}
		if err := m.Unlock(held); err != nil {
			return err
		}
		return <-got
	},
	"spin": func(ctx context.Context, _ *rlock.Client, name string) error {
		unlock, err := spin.Lock(ctx, name)
		if err != nil {
			return err
		}
		return unlock(ctx)
	},
}
