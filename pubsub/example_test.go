package pubsub_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/pubsub"
)

// A goroutine waits for another process to finish a job: it subscribes to the
// job's channel, then checks the result in Redis, and waits for a message only
// while the result is missing. A result stored before the subscription is
// found by the check; one announced after it wakes the waiter.
func Example() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close() // last: the Multiplexer uses the client until it is closed
	mux, err := pubsub.New(rc)
	if err != nil {
		panic(err)
	}
	defer mux.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	result, channel := "example:job:42:result", "example:job:42:done"
	if err := rc.Do(ctx, rc.B().Del().Key(result).Build()).Error(); err != nil {
		panic(err)
	}

	w, err := mux.Subscribe(ctx, channel)
	if err != nil {
		panic(err)
	}
	// Another process finishes the job: it stores the result, then announces it.
	go func() {
		rc.Do(ctx, rc.B().Set().Key(result).Value("42 rows exported").Build())
		rc.Do(ctx, rc.B().Publish().Channel(channel).Message("1").Build())
	}()
	for {
		v, err := rc.Do(ctx, rc.B().Get().Key(result).Build()).ToString()
		if err == nil {
			w.Leave(true)
			fmt.Println("job 42:", v)
			break
		}
		if !rueidis.IsRedisNil(err) {
			panic(err)
		}
		if err := w.Wait(ctx); err != nil {
			w.Leave(false) // gave up: a wake meant for us goes to the next waiter
			panic(err)
		}
	}
	// Output:
	// job 42: 42 rows exported
}

// A message's payload says how many Waiters it is for: a budget of 2 wakes
// the two oldest Waiters of weight 1, and WakeAll wakes every one.
func ExampleMultiplexer_SubscribeWeighted() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	mux, err := pubsub.New(rc)
	if err != nil {
		panic(err)
	}
	defer mux.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const channel = "example:printers:freed"
	var ws []*pubsub.Waiter
	for range 3 {
		w, err := mux.SubscribeWeighted(ctx, channel, 1)
		if err != nil {
			panic(err)
		}
		defer w.Leave(true)
		ws = append(ws, w)
	}
	woken := func() (n int) {
		for _, w := range ws {
			select {
			case <-w.C():
				n++
			default:
			}
		}
		return n
	}

	// Two printers freed: the two oldest Waiters are woken.
	rc.Do(ctx, rc.B().Publish().Channel(channel).Message("2").Build())
	for _, w := range ws[:2] {
		if err := w.Wait(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println("third waiter woken by the budget of 2:", woken() > 0)

	rc.Do(ctx, rc.B().Publish().Channel(channel).Message(pubsub.WakeAll).Build())
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println("every waiter woken by WakeAll:", len(ws))
	fmt.Println("waiting on the channel:", mux.Waiting(channel))
	// Output:
	// third waiter woken by the budget of 2: false
	// every waiter woken by WakeAll: 3
	// waiting on the channel: 3
}
