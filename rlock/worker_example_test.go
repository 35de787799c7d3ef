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

// A worker exports a report in parts under a lock. It sends the lock's fencing
// token with every write, so that the store can refuse a holder that lost the
// lock without knowing it, and it does each part's work with the lock context,
// so that it stops as soon as the lock is lost: then the context's cause is
// ErrLeaseLost, another worker may hold the lock, and the worker takes it
// again before it carries on (with a higher token).
func ExampleMutex_Lock_worker() {
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
	m := c.Mutex("report:2024-06")

	// The store the lock protects refuses a write whose token is lower than
	// one it has accepted: a stale holder cannot overwrite its successor.
	var highest uint64
	write := func(token uint64, part int) error {
		if token < highest {
			return fmt.Errorf("part %d: stale token %d", part, token)
		}
		highest = token
		return nil
	}
	// export does the work of one part, and gives up when ctx ends. The
	// first time, part 2 takes longer than the first hold's lease.
	slow := map[int]bool{2: true}
	export := func(ctx context.Context, part int) error {
		d := time.Millisecond
		if slow[part] {
			slow[part], d = false, time.Minute
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}

	// The first hold gets a short fixed lease so that the example shows a
	// loss. Without WithLease the watchdog renews the lease while the lock is
	// held, and a lock is lost only to a pause longer than the watchdog
	// timeout, a Redis unreachable for as long, a restart or ForceUnlock.
	opts := []rlock.LockOption{rlock.WithLease(500 * time.Millisecond)}
	var lastToken uint64
	for part := 1; part <= 3; {
		lockCtx, err := m.Lock(ctx, opts...)
		if err != nil {
			panic(err)
		}
		opts = nil
		token, err := m.Token(lockCtx)
		if err != nil {
			panic(err)
		}
		fmt.Println("locked; token above the last one:", token > lastToken)
		lastToken = token
		for ; part <= 3; part++ {
			if err := export(lockCtx, part); err != nil {
				fmt.Printf("part %d interrupted; lease lost: %v\n", part, errors.Is(err, rlock.ErrLeaseLost))
				break
			}
			if err := write(token, part); err != nil {
				panic(err)
			}
			fmt.Printf("part %d written\n", part)
		}
		// After a loss Unlock reports it (ErrNotHeld, matching ErrLeaseLost)
		// and changes nothing in Redis.
		if err := m.Unlock(lockCtx); err != nil && !errors.Is(err, rlock.ErrLeaseLost) {
			panic(err)
		}
	}
	// Output:
	// locked; token above the last one: true
	// part 1 written
	// part 2 interrupted; lease lost: true
	// locked; token above the last one: true
	// part 2 written
	// part 3 written
}
