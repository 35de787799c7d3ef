package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// The examples find Redis as a program would: at REDIS_ADDR, else at Redis's
// default address. Under go test, TestMain points REDIS_ADDR at a server of the
// test run unless it is set (see main_test.go).

func Example() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	// Every process configures the limit; it is set in Redis on first use
	// (and again whenever it went missing, after a restart say).
	s := semaphore.New(c, "gpu-pool", semaphore.WithLimit(4))
	permitCtx, err := s.Acquire(ctx, 3)
	if err != nil {
		panic(err)
	}
	limit, _ := s.Limit(ctx)
	fmt.Println("limit:", limit)
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
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	s := semaphore.New(c, "exports", semaphore.WithLimit(2))

	first, err := s.TryAcquire(ctx, 2)
	if err != nil {
		panic(err)
	}
	_, err = s.TryAcquire(ctx, 1)
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
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
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

func ExampleWithWaitTimeout() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	s := semaphore.New(c, "encoders", semaphore.WithLimit(2))

	busy, err := s.Acquire(ctx, 2) // every permit taken
	if err != nil {
		panic(err)
	}

	// Wait at most 100ms for a permit; the wait timeout does not bound the
	// hold, and ctx still bounds the wait too.
	_, err = s.Acquire(ctx, 1, semaphore.WithWaitTimeout(100*time.Millisecond))
	fmt.Println("gave up waiting:", errors.Is(err, semaphore.ErrNoPermits), errors.Is(err, context.DeadlineExceeded))

	// A wait timeout of 0 makes one attempt, as TryAcquire.
	_, err = s.Acquire(ctx, 1, semaphore.WithWaitTimeout(0))
	fmt.Println("one attempt:", errors.Is(err, semaphore.ErrNoPermits))

	// A release hands its permits to the waiters at the head of the queue.
	go func() {
		time.Sleep(50 * time.Millisecond) // the other holder finishes its work
		_ = s.Release(busy)
	}()
	permitCtx, err := s.Acquire(ctx, 1, semaphore.WithWaitTimeout(10*time.Second))
	fmt.Println("acquired once released:", err == nil)
	if err == nil {
		_ = s.Release(permitCtx)
	}
	// Output:
	// gave up waiting: true true
	// one attempt: true
	// acquired once released: true
}
