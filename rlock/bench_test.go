package rlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// benchClient returns an rlock Client on its own rueidis client and Redis
// (a private redis-server, or $REDIS_ADDR), with a key prefix of its own;
// everything is closed at cleanup, the rlock Client first.
func benchClient(b *testing.B) (*rlock.Client, *redistest.Server) {
	b.Helper()
	srv := redistest.New(b)
	rc := redistest.Client(b, srv)
	c, err := rlock.New(rc, rlock.WithKeyPrefix(strings.TrimSuffix(redistest.KeyPrefix(b), ":")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c, srv
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
	c, srv := benchClient(b)
	ms := []*rlock.Mutex{c.Mutex("hot")}
	for range clients - 1 {
		c2, err := rlock.New(redistest.Client(b, srv), rlock.WithKeyPrefix(strings.TrimSuffix(redistest.KeyPrefix(b), ":")))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c2.Close() })
		ms = append(ms, c2.Mutex("hot"))
	}
	benchAcquisitions(b, srv, clients*perClient, func(i int) *rlock.Mutex { return ms[i%clients] })
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
