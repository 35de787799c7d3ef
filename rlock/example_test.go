package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
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
	defer rc.Close() // last: the Client uses it until it is closed
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	m := c.Mutex("invoice:1001")
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// ... the critical section, doing its work with lockCtx ...

	// Any context that does not carry the hold is another owner.
	_, err = m.TryLock(ctx)
	fmt.Println("second owner locked out:", errors.Is(err, rlock.ErrLocked))

	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// second owner locked out: true
	// lock context ended by: rlock: unlocked
}

func ExampleMutex_Lock_reentrant() {
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
	m := c.Mutex("report")

	outer, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	inner, err := m.Lock(outer) // the context carries the hold: re-entry
	if err != nil {
		panic(err)
	}
	n, _ := m.HoldCount(inner)
	fmt.Println("hold count:", n)

	_ = m.Unlock(inner)
	locked, _ := m.IsLocked(context.Background())
	fmt.Println("locked after inner unlock:", locked)
	_ = m.Unlock(outer)
	locked, _ = m.IsLocked(context.Background())
	fmt.Println("locked after outer unlock:", locked)
	// Output:
	// hold count: 2
	// locked after inner unlock: true
	// locked after outer unlock: false
}

// A graceful shutdown: the signal (SIGINT) cancels the caller's context while
// it holds the lock. That context bounded the wait only, so the lock is still
// held and the lock context live: the critical section finishes its work
// with the lock context, and Unlock succeeds.
func ExampleMutex_Lock_shutdown() {
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

	// In a program: ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	m := c.Mutex("ledger")
	lockCtx, err := m.Lock(ctx) // ctx bounds the wait only
	if err != nil {
		panic(err)
	}
	for i, step := range []string{"debit", "credit"} {
		if i == 1 {
			stop() // the signal arrives mid-section
		}
		// Each step runs with lockCtx, which ends only if the lock is lost.
		if err := lockCtx.Err(); err != nil {
			fmt.Println("lock lost, stopping:", context.Cause(lockCtx))
			return
		}
		fmt.Printf("%s done (shutdown requested: %v)\n", step, ctx.Err() != nil)
	}
	fmt.Println("unlock:", m.Unlock(lockCtx)) // lockCtx, not ctx
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// debit done (shutdown requested: false)
	// credit done (shutdown requested: true)
	// unlock: <nil>
	// lock context ended by: rlock: unlocked
}

func ExampleMutex_TryLock() {
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
	m := c.Mutex("nightly-job")

	lockCtx, err := m.TryLock(context.Background(), rlock.WithLease(time.Minute))
	if errors.Is(err, rlock.ErrLocked) {
		fmt.Println("another worker runs the job")
		return
	}
	if err != nil {
		panic(err)
	}
	defer m.Unlock(lockCtx)
	fmt.Println("running the job")
	// Output:
	// running the job
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
	m := c.Mutex("busy")
	ctx := context.Background()

	holder, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Unlock(holder)

	// Wait at most 100ms for the lock, while ctx bounds nothing here.
	_, err = m.Lock(ctx, rlock.WithWaitTimeout(100*time.Millisecond))
	fmt.Println("gave up waiting:", errors.Is(err, rlock.ErrLocked), errors.Is(err, context.DeadlineExceeded))

	// A wait timeout of 0 makes one attempt, as TryLock.
	_, err = m.Lock(ctx, rlock.WithWaitTimeout(0))
	fmt.Println("one attempt:", errors.Is(err, rlock.ErrLocked))
	// Output:
	// gave up waiting: true true
	// one attempt: true
}
