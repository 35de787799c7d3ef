package rlock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// Two processes (Clients a and b) wait for a fair lock: a-1, then b-1, then
// a-2. They get it in that order; cohorting Mutexes would serve a-2 right after
// a-1, ahead of b-1, as goroutines of one Client.
func ExampleClient_FairMutex() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	newClient := func() (*rlock.Client, rueidis.Client) { // one per process, in a real program
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			panic(err)
		}
		c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
		if err != nil {
			panic(err)
		}
		return c, rc
	}
	a, rca := newClient()
	defer rca.Close()
	defer a.Close()
	b, rcb := newClient()
	defer rcb.Close()
	defer b.Close()
	ctx := context.Background()

	holder, err := a.FairMutex("printer").Lock(ctx)
	if err != nil {
		panic(err)
	}
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
		// Only to fix the arrival order in this example: wait until the call
		// is queued, reading the lock's queue (an internal key).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			n, _ := rca.Do(ctx, rca.B().Zcard().Key("example:{printer}:queue").Build()).AsInt64()
			if n > int64(i) {
				break
			}
			if time.Now().After(deadline) {
				panic("not queued within 10s")
			}
		}
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
