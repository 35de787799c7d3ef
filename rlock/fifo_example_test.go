package rlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// Two processes (Clients a and b) wait for a fair lock: a-1, then b-1, then
// a-2. They get it in that order; cohorting Mutexes would serve a-2 right after
// a-1, ahead of b-1, as goroutines of one Client.
func ExampleClient_FairMutex() {
	rca, rcb := newRedis(), newRedis()
	defer rca.Close()
	defer rcb.Close()
	a, _ := rlock.New(rca, rlock.WithKeyPrefix("example"))
	defer a.Close()
	b, _ := rlock.New(rcb, rlock.WithKeyPrefix("example"))
	defer b.Close()
	ctx := context.Background()

	holder, _ := a.FairMutex("printer").Lock(ctx)
	done := make(chan string)
	for i, w := range []struct {
		name string
		c    *rlock.Client
	}{{"a-1", a}, {"b-1", b}, {"a-2", a}} {
		go func() {
			m := w.c.FairMutex("printer")
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				panic(err)
			}
			done <- w.name
			_ = m.Unlock(lockCtx)
		}()
		waitQueued(rca, "example:{printer}:queue", int64(i+1)) // only to fix the arrival order
	}
	_ = a.FairMutex("printer").Unlock(holder)
	for range 3 {
		fmt.Println(<-done)
	}
	// Output:
	// a-1
	// b-1
	// a-2
}

// waitQueued waits until n Lock calls are queued in the lock's Redis queue
// (an internal key, read here only so that the example's order is certain).
func waitQueued(rc rueidis.Client, queue string, n int64) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if got, _ := rc.Do(context.Background(), rc.B().Zcard().Key(queue).Build()).AsInt64(); got >= n {
			return
		}
		time.Sleep(time.Millisecond) // polling with a deadline, in the example only
	}
	panic("not queued within 10s")
}
