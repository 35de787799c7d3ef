package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// The examples run against a throwaway redis-server, started on first use and
// stopped by TestMain.
var (
	exampleOnce   sync.Once
	exampleServer *redistest.Server
	exampleErr    error
)

func redisAddr() string {
	exampleOnce.Do(func() {
		exampleServer, exampleErr = redistest.StartServer(context.Background())
	})
	if exampleErr != nil {
		panic("examples need Redis: " + exampleErr.Error())
	}
	return exampleServer.Addr()
}

func stopExampleServer() {
	if exampleServer != nil {
		_ = exampleServer.Close()
	}
}

func newRedis() rueidis.Client {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	if err != nil {
		panic(err)
	}
	return rc
}

func Example() {
	rc := newRedis()
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	s := semaphore.New(c, "gpu-pool")
	// Every process may try to set the limit at start-up: the first one wins.
	if _, err := s.TrySetLimit(ctx, 4); err != nil {
		panic(err)
	}
	limit, _ := s.Limit(ctx)
	fmt.Println("limit:", limit)

	permitCtx, err := s.Acquire(ctx, 3)
	if err != nil {
		panic(err)
	}
	// ... use three GPUs, doing the work with permitCtx ...
	available, _ := s.Available(ctx)
	fmt.Println("holding:", s.Permits(permitCtx), "available:", available)

	if err := s.Release(permitCtx); err != nil {
		panic(err)
	}
	available, _ = s.Available(ctx)
	fmt.Println("after release, available:", available)
	fmt.Println("permit context ended by:", context.Cause(permitCtx))
	// Output:
	// limit: 4
	// holding: 3 available: 1
	// after release, available: 4
	// permit context ended by: semaphore: released
}

func ExampleSemaphore_TryAcquire() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	ctx := context.Background()
	s := semaphore.New(c, "exports")
	_, _ = s.TrySetLimit(ctx, 2)

	first, _ := s.TryAcquire(ctx, 2)
	_, err := s.TryAcquire(ctx, 1)
	fmt.Println("pool exhausted:", errors.Is(err, semaphore.ErrNoPermits))

	_ = s.Release(first)
	second, err := s.TryAcquire(ctx, 1)
	fmt.Println("after release:", err, s.Permits(second))
	_ = s.Release(second)
	// Output:
	// pool exhausted: true
	// after release: <nil> 1
}

func ExampleNewLock() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	ctx := context.Background()
	l := semaphore.NewLock(c, "migrations")

	lockCtx, err := l.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Unlike rlock.Mutex the lock is not reentrant: even its own holder is
	// locked out.
	_, err = l.TryLock(lockCtx)
	fmt.Println("holder locked out:", errors.Is(err, semaphore.ErrNoPermits))

	if err := l.Unlock(lockCtx); err != nil {
		panic(err)
	}
	again, err := l.TryLock(ctx)
	fmt.Println("free again:", err == nil)
	_ = l.Unlock(again)
	// Output:
	// holder locked out: true
	// free again: true
}
