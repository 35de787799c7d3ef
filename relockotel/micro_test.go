package relockotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relockio/relock/relockotel"
	"github.com/relockio/relock/rlock"
)

// BenchmarkObserverEvents is what the Observer adds to one Lock and Unlock
// taken by a local pass: an acquisition, a release and a hold end.
// Spans are sampled (all of them) or not (the tracer of a provider that
// samples nothing).
func BenchmarkObserverEvents(b *testing.B) {
	b.Run("metrics", func(b *testing.B) { benchEvents(b, sdktrace.NeverSample()) })
	b.Run("metrics+spans", func(b *testing.B) { benchEvents(b, sdktrace.AlwaysSample()) })
}

func benchEvents(b *testing.B, sampler sdktrace.Sampler) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	o, err := relockotel.NewObserver(relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	acq := &rlock.Event{Kind: "mutex", Op: "Lock", Name: "hot", Start: now, Duration: time.Microsecond, Waited: true, Via: rlock.ViaLocalPass, HandOff: time.Microsecond}
	rel := &rlock.Event{Kind: "mutex", Op: "Unlock", Name: "hot", Start: now, Duration: time.Microsecond, Final: true}
	end := &rlock.Event{Kind: "mutex", Name: "hot", Start: now, Duration: time.Microsecond, Err: rlock.ErrUnlocked}
	b.ReportAllocs()
	for b.Loop() {
		o.Acquired(ctx, acq)
		o.Released(ctx, rel)
		o.HoldEnded(end)
	}
}
