package relockotel_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/relockotel"
	"github.com/relockio/relock/rlock"
)

// benchVariants runs f with plain Clients and with Clients instrumented by a
// real SDK (a meter provider with a manual reader, a tracer provider sampling
// every span, exported nowhere), side by side.
func benchVariants(b *testing.B, n int, f func(b *testing.B, cs []*rlock.Client)) {
	b.Run("plain", func(b *testing.B) { f(b, benchClients(b, n, false)) })
	b.Run("otel", func(b *testing.B) { f(b, benchClients(b, n, true)) })
}

func benchClients(b *testing.B, n int, instrumented bool) []*rlock.Client {
	b.Helper()
	srv := redistest.New(b)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(b), ":")
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	cs := make([]*rlock.Client, n)
	for i := range cs {
		lockOpts := []rlock.Option{rlock.WithKeyPrefix(prefix)}
		var c *rlock.Client
		var err error
		if instrumented {
			c, err = relockotel.NewClient(redistest.Client(b, srv), lockOpts, relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(tp))
		} else {
			c, err = rlock.New(redistest.Client(b, srv), lockOpts...)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

// BenchmarkLockUnlock is an uncontended Lock and Unlock (a round trip each),
// without and with OpenTelemetry.
func BenchmarkLockUnlock(b *testing.B) {
	benchVariants(b, 1, func(b *testing.B, cs []*rlock.Client) {
		m := cs[0].Mutex("bench")
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			lockCtx, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(lockCtx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHot is one hot lock, 16 goroutines on each of two Clients (mostly
// local passes, no round trip), without and with OpenTelemetry; an op is one
// acquisition.
func BenchmarkHot(b *testing.B) {
	const clients, perClient = 2, 16
	benchVariants(b, clients, func(b *testing.B, cs []*rlock.Client) {
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		var left atomic.Int64
		left.Store(int64(b.N))
		var wg sync.WaitGroup
		for i := range clients * perClient {
			m := cs[i%clients].Mutex("hot")
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					lockCtx, err := m.Lock(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if err := m.Unlock(lockCtx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}
