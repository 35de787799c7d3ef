package semaphore_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// BenchmarkTurnsHot is one hot one-permit semaphore (NewLock) with an empty
// critical section, 16 goroutines on each of two Clients: Clients take turns
// in Redis, and the permit passes among the goroutines of a Client within a
// turn; an op is one acquisition.
func BenchmarkTurnsHot(b *testing.B) { benchTurns(b, 16) }

// BenchmarkTurnsWorkers is one goroutine on each of two Clients locking in a
// loop: a turn is the permit kept for the worker's next Lock (the linger).
func BenchmarkTurnsWorkers(b *testing.B) { benchTurns(b, 1) }

func benchTurns(b *testing.B, perClient int) {
	const clients = 2
	srv := redistest.New(b)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(b), ":")
	locks := make([]*semaphore.Lock, clients)
	for i := range locks {
		c, err := rlock.New(redistest.Client(b, srv), rlock.WithKeyPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		locks[i] = semaphore.NewLock(c, "hot")
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for i := range clients * perClient {
		l := locks[i%clients]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lockCtx, err := l.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(lockCtx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
