package rlock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// Goroutines that must exclude one another each Lock with a context that
// does not carry the hold: a lock context handed to them re-enters, and all
// of them are inside at once.
func ExampleMutex_Lock_goroutines() {
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
	m := c.Mutex("ledger")

	// Wrong: the goroutines are given the lock context, which carries the
	// hold, so each Lock re-enters it.
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	var entered, leave, left sync.WaitGroup
	leave.Add(1)
	for range 4 {
		entered.Add(1)
		left.Add(1)
		go func() {
			defer left.Done()
			inner, err := m.Lock(lockCtx) // re-entry: does not wait
			if err != nil {
				panic(err)
			}
			entered.Done()
			leave.Wait()
			_ = m.Unlock(inner)
		}()
	}
	entered.Wait() // all four are inside at once
	n, _ := m.HoldCount(lockCtx)
	fmt.Println("lock context shared, hold count:", n)
	leave.Done()
	left.Wait()
	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}

	// Right: each goroutine locks with ctx, which carries no hold, and
	// waits its turn.
	var inside atomic.Int32
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, err := m.Lock(ctx)
			if err != nil {
				panic(err)
			}
			if inside.Add(1) > 1 {
				overlap.Store(true)
			}
			inside.Add(-1)
			if err := m.Unlock(own); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("own contexts, two inside at once:", overlap.Load())
	// Output:
	// lock context shared, hold count: 5
	// own contexts, two inside at once: false
}
