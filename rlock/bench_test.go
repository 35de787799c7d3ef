package rlock_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// benchClient returns an rlock Client on its own rueidis client and Redis
// (a private redis-server, or $REDIS_ADDR), with a key prefix of its own;
// everything is closed at cleanup, the rlock Client first.
func benchClient(b *testing.B) (*rlock.Client, *redistest.Server) {
	b.Helper()
	cs, srv := benchClients(b, 1)
	return cs[0], srv
}

// benchClients is benchClient for n Clients, each on its own rueidis client,
// all on one Redis and one key prefix, so that a lock name means the same
// lock to each of them (redistest.KeyPrefix draws a new prefix at every
// call).
func benchClients(b *testing.B, n int, opts ...rlock.Option) ([]*rlock.Client, *redistest.Server) {
	b.Helper()
	srv := redistest.New(b)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(b), ":")
	cs := make([]*rlock.Client, n)
	for i := range cs {
		c, err := rlock.New(redistest.Client(b, srv), append([]rlock.Option{rlock.WithKeyPrefix(prefix)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	if n > 1 {
		// A lock taken through one Client must be taken for the others.
		ctx := context.Background()
		held, err := cs[0].Mutex("shared-probe").Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for i, c := range cs[1:] {
			if _, err := c.Mutex("shared-probe").TryLock(ctx); !errors.Is(err, rlock.ErrLocked) {
				b.Fatalf("Client %d took a lock Client 0 held (TryLock: %v): the Clients do not share their locks", i+1, err)
			}
		}
		if err := cs[0].Mutex("shared-probe").Unlock(held); err != nil {
			b.Fatal(err)
		}
	}
	return cs, srv
}

// benchCommands reports the Redis commands per operation that ran between
// two INFO commandstats snapshots (a script counts once, plus once per
// command it runs). On a shared $REDIS_ADDR server other traffic counts too.
func benchCommands(b *testing.B, srv *redistest.Server, before map[string]int64) {
	b.Helper()
	after, err := srv.CommandStats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for cmd, calls := range after {
		if cmd != "info" && cmd != "hello" && !strings.HasPrefix(cmd, "client|") {
			n += calls - before[cmd]
		}
	}
	b.ReportMetric(float64(n)/float64(b.N), "redis-cmds/op")
}

// BenchmarkMutexLockUnlock is an uncontended Lock and Unlock: the round trips
// of one acquisition and one release, and what they cost the client.
func BenchmarkMutexLockUnlock(b *testing.B) {
	c, srv := benchClient(b)
	m := c.Mutex("bench")
	ctx := context.Background()
	before, err := srv.CommandStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		lockCtx, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(lockCtx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	benchCommands(b, srv, before)
}

// BenchmarkUncontendedVsSpin sets an uncontended rlock.Mutex Lock and Unlock
// beside the same on the SET NX PX spin lock with a compare-and-delete Lua
// release that the bench module and the demo measure against
// (measure.SpinLocker): one process, one Redis, one op each in turn of the
// sub-benchmarks, so that what they cost the client compares. Under "own"
// every op re-locks one name; under "new" every op locks a name never used
// before (a lock per entity, taken once). cpu-ns/op is this process's CPU
// time per op (user + system, /proc/self/stat; not reported where that file
// is missing): the client's work, background goroutines included, without
// the round trips' idle wait that ns/op also holds. Redis is another process:
// redis-cpu-ns/op is its CPU time per op (INFO cpu), on a private server.
// rlock-functions is rlock WithRedisFunctions(true), its scripts called as
// Redis functions.
func BenchmarkUncontendedVsSpin(b *testing.B) {
	c, srv := benchClient(b)
	// The same Mutex with its scripts called as Redis functions, on the same
	// server.
	byFunctions, err := rlock.New(redistest.Client(b, srv), rlock.WithKeyPrefix(strings.TrimSuffix(redistest.KeyPrefix(b), ":")),
		rlock.WithRedisFunctions(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = byFunctions.Close() })
	spin := measure.NewSpinLocker(redistest.Client(b, srv), "bench", 30*time.Second)
	spinPrefix := redistest.KeyPrefix(b)
	ctx := context.Background()
	locks := []struct {
		name string
		op   func(name string) error
	}{
		{"rlock", func(name string) error {
			m := c.Mutex(name)
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			return m.Unlock(lockCtx)
		}},
		{"rlock-functions", func(name string) error {
			m := byFunctions.Mutex(name)
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			return m.Unlock(lockCtx)
		}},
		{"spin", func(name string) error {
			unlock, err := spin.Lock(ctx, spinPrefix+name)
			if err != nil {
				return err
			}
			return unlock(ctx)
		}},
	}
	for _, names := range []string{"own", "new"} {
		b.Run(names, func(b *testing.B) {
			for _, l := range locks {
				b.Run(l.name, func(b *testing.B) {
					name := func(int) string { return "entity" }
					if names == "new" {
						// A prefix of its own per run, so that no name
						// repeats over b.Loop's growing runs.
						pfx := "entity-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
						name = func(i int) string { return pfx + strconv.Itoa(i) }
					}
					benchUncontended(b, srv, func(i int) error { return l.op(name(i)) })
				})
			}
		})
	}
}

// benchUncontended runs op(i) for i = 0, 1, ... b.N-1 and reports the Redis
// commands and the process's CPU time per op.
func benchUncontended(b *testing.B, srv *redistest.Server, op func(i int) error) {
	before, err := srv.CommandStats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	cpu0, cpuOK := processCPU()
	srvCPU0, srvErr := srv.CPU(context.Background())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	// The server's CPU per op (only this benchmark uses a private server).
	if srvCPU1, err := srv.CPU(context.Background()); err == nil && srvErr == nil && srv.Owned() {
		b.ReportMetric(float64(srvCPU1-srvCPU0)/float64(b.N), "redis-cpu-ns/op")
	}
	benchCommands(b, srv, before)
}

// processCPU returns this process's user + system CPU time so far, from
// /proc/self/stat (fields 14 and 15, in clock ticks of 10ms: USER_HZ is 100
// on Linux); ok is false where the file is missing or unreadable. The 10ms
// ticks make it coarse: b.Loop's final run lasts about a second, so the
// figure is good to about 1%.
func processCPU() (ns int64, ok bool) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, false
	}
	f := strings.Fields(s[end+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, false
	}
	var ticks int64
	for _, v := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return ticks * int64(10*time.Millisecond), true
}

// BenchmarkMutexTryLockHeld is TryLock on a lock another owner holds: one
// failed attempt.
func BenchmarkMutexTryLockHeld(b *testing.B) {
	c, srv := benchClient(b)
	m := c.Mutex("bench")
	ctx := context.Background()
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Unlock(lockCtx) })
	before, err := srv.CommandStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		// ctx does not carry the hold: it is another owner.
		if _, err := m.TryLock(ctx); !errors.Is(err, rlock.ErrLocked) {
			b.Fatalf("TryLock on a held lock: got %v, want ErrLocked", err)
		}
	}
	b.StopTimer()
	benchCommands(b, srv, before)
}

// BenchmarkMutexManyLocks is the many-locks load in one Client: 10 goroutines
// on each of 1000 locks, each taking its lock and letting go at once; an op is
// one acquisition. Almost every acquisition is a local pass within a cohort.
func BenchmarkMutexManyLocks(b *testing.B) {
	const locks, perLock = 1000, 10
	c, srv := benchClient(b)
	benchAcquisitions(b, srv, locks*perLock, func(i int) *rlock.Mutex {
		return c.Mutex("bench-" + strconv.Itoa(i%locks))
	})
}

// BenchmarkMutexHot is one hot lock with an empty critical section, 16
// goroutines on each of two Clients: Clients take turns in Redis, and the
// lock passes among the goroutines of a Client within a turn (cohorting); an
// op is one acquisition.
func BenchmarkMutexHot(b *testing.B) {
	const clients, perClient = 2, 16
	cs, srv := benchClients(b, clients)
	benchAcquisitions(b, srv, clients*perClient, func(i int) *rlock.Mutex { return cs[i%clients].Mutex("hot") })
}

// BenchmarkMutexTurnWorkers is one goroutine on each of two Clients locking
// in a loop: a turn is the lock kept for the worker's next Lock (the linger)
// and the place its release reserves.
func BenchmarkMutexTurnWorkers(b *testing.B) {
	const clients = 2
	cs, srv := benchClients(b, clients)
	benchAcquisitions(b, srv, clients, func(i int) *rlock.Mutex { return cs[i%clients].Mutex("workers") })
}

// benchAcquisitions runs b.N acquisitions with an empty critical section,
// spread over goroutines, goroutine i on mutexFor(i), and reports the Redis
// commands per acquisition.
func benchAcquisitions(b *testing.B, srv *redistest.Server, goroutines int, mutexFor func(i int) *rlock.Mutex) {
	ctx := context.Background()
	before, err := srv.CommandStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for i := range goroutines {
		m := mutexFor(i)
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lockCtx, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(lockCtx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	benchCommands(b, srv, before)
}

// BenchmarkMutexHotObserved is BenchmarkMutexHot with an Observer (one that
// counts): what the events cost the in-process hot path.
func BenchmarkMutexHotObserved(b *testing.B) {
	const clients, perClient = 2, 16
	cs, srv := benchClients(b, clients, rlock.WithObserver(&countingObserver{}))
	benchAcquisitions(b, srv, clients*perClient, func(i int) *rlock.Mutex { return cs[i%clients].Mutex("hot") })
}
