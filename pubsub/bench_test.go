package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// benchPatience bounds every wait for a wake, so that a lost message fails
// the benchmark instead of hanging it.
const benchPatience = 10 * time.Second

// benchMux returns a Multiplexer and a separate publishing client on a Redis
// of their own (or $REDIS_ADDR), a channel name unique to the benchmark, all
// closed at cleanup.
func benchMux(b *testing.B) (*pubsub.Multiplexer, rueidis.Client, string) {
	b.Helper()
	srv := redistest.New(b)
	m, err := pubsub.New(redistest.Client(b, srv))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	return m, redistest.Client(b, srv), redistest.KeyPrefix(b) + "ch"
}

// BenchmarkSubscribeLeaveSubscribed joins and leaves the queue of a channel
// that stays subscribed (another Waiter holds it): the local bookkeeping of a
// wait, with no Redis round trip.
func BenchmarkSubscribeLeaveSubscribed(b *testing.B) {
	m, _, ch := benchMux(b)
	ctx := context.Background()
	anchor, err := m.Subscribe(ctx, ch)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { anchor.Leave(true) })
	b.ReportAllocs()
	for b.Loop() {
		w, err := m.Subscribe(ctx, ch)
		if err != nil {
			b.Fatal(err)
		}
		w.Leave(true)
	}
}

// BenchmarkFanOutWake publishes WakeAll to a channel with n Waiters and waits
// until every one of them has been woken: one PUBLISH round trip plus the
// fan-out inside the Multiplexer.
func BenchmarkFanOutWake(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			m, pub, ch := benchMux(b)
			ctx := context.Background()
			ws := make([]*pubsub.Waiter, n)
			for i := range ws {
				w, err := m.Subscribe(ctx, ch)
				if err != nil {
					b.Fatal(err)
				}
				ws[i] = w
			}
			b.Cleanup(func() {
				for _, w := range ws {
					w.Leave(true)
				}
			})
			timer := time.NewTimer(benchPatience)
			defer timer.Stop()
			b.ReportAllocs()
			for b.Loop() {
				if err := pub.Do(ctx, pub.B().Publish().Channel(ch).Message(pubsub.WakeAll).Build()).Error(); err != nil {
					b.Fatal(err)
				}
				timer.Reset(benchPatience)
				for i, w := range ws {
					select {
					case <-w.C():
					case <-timer.C:
						b.Fatalf("waiter %d of %d not woken within %v", i, n, benchPatience)
					}
				}
			}
		})
	}
}
