package rlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// BenchmarkScriptsAsFunctions sets each lock kind's uncontended acquisition
// and release beside itself, its scripts called as Redis functions
// (WithRedisFunctions(true)) and by EVALSHA (the default), each on a private
// server, with 16 goroutines on one Client, each on a name of its own, so
// that Redis is the bottleneck:
//
//	go test -run '^$' -bench ScriptsAsFunctions -benchtime 3s ./rlock
//
// script-µs/call is Redis's own time per script call (INFO commandstats,
// usec over calls of FCALL, EVALSHA and EVAL), redis-cpu-µs/op its CPU time
// per acquisition and release (INFO cpu).
func BenchmarkScriptsAsFunctions(b *testing.B) {
	kinds := []struct {
		name string
		op   func(c *rlock.Client) func(ctx context.Context, name string) error
	}{
		{"mutex", func(c *rlock.Client) func(context.Context, string) error {
			return func(ctx context.Context, name string) error {
				m := c.Mutex(name)
				l, err := m.Lock(ctx)
				if err != nil {
					return err
				}
				return m.Unlock(l)
			}
		}},
		{"rwmutex-read", func(c *rlock.Client) func(context.Context, string) error {
			return func(ctx context.Context, name string) error {
				m := c.RWMutex(name)
				l, err := m.RLock(ctx)
				if err != nil {
					return err
				}
				return m.RUnlock(l)
			}
		}},
		{"semaphore", func(c *rlock.Client) func(context.Context, string) error {
			return func(ctx context.Context, name string) error {
				s := semaphore.New(c, name, semaphore.WithLimit(1))
				p, err := s.Acquire(ctx, 1)
				if err != nil {
					return err
				}
				return s.Release(p)
			}
		}},
	}
	for _, kind := range kinds {
		for _, functions := range []bool{true, false} {
			b.Run(kind.name+"/"+map[bool]string{true: "functions", false: "eval"}[functions], func(b *testing.B) {
				srv := redistest.Owned(b)
				c, err := rlock.New(redistest.Client(b, srv), rlock.WithRedisFunctions(functions))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				benchScripts(b, srv, kind.op(c))
			})
		}
	}
}

// benchScripts runs op in 16 goroutines, each on a name of its own, and
// reports what the server spent on it (see BenchmarkScriptsAsFunctions).
func benchScripts(b *testing.B, srv *redistest.Server, op func(ctx context.Context, name string) error) {
	ctx := context.Background()
	if err := op(ctx, "warm-up"); err != nil { // loads the library, when functions
		b.Fatal(err)
	}
	if _, err := srv.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	cpu0, err := srv.CPU(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := "entity-" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			if err := op(ctx, name); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cpu1, err := srv.CPU(ctx)
	if err != nil {
		b.Fatal(err)
	}
	calls, usec, err := scriptTime(ctx, srv)
	if err != nil {
		b.Fatal(err)
	}
	if calls > 0 {
		b.ReportMetric(float64(usec)/float64(calls), "script-µs/call")
	}
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/op")
}

// scriptTime sums the calls and usec of INFO commandstats' script commands.
func scriptTime(ctx context.Context, srv *redistest.Server) (calls, usec int64, err error) {
	msg, err := srv.Do(ctx, "INFO", "commandstats")
	if err != nil {
		return 0, 0, err
	}
	text, _ := msg.ToString()
	for line := range strings.Lines(text) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !redistest.IsScript([]string{strings.TrimPrefix(name, "cmdstat_")}) {
			continue
		}
		var c, u int64
		if _, err := fmt.Sscanf(fields, "calls=%d,usec=%d", &c, &u); err != nil {
			return 0, 0, fmt.Errorf("commandstats line %q: %w", line, err)
		}
		calls, usec = calls+c, usec+u
	}
	return calls, usec, nil
}
