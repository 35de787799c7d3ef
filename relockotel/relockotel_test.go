package relockotel_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/relockotel"
	"github.com/relockio/relock/rlock"
)

// clients returns n instrumented Clients on one Redis and key prefix.
func clients(t testing.TB, n int, opts ...relockotel.Option) []*rlock.Client {
	t.Helper()
	srv := redistest.New(t)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	cs := make([]*rlock.Client, n)
	for i := range cs {
		c, err := relockotel.NewClient(redistest.Client(t, srv), []rlock.Option{rlock.WithKeyPrefix(prefix)}, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

// sum adds up the points of the counter called name whose attributes
// include match.
func sum(t *testing.T, rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) int64 {
	t.Helper()
	var n int64
	for _, p := range points[metricdata.Sum[int64]](t, rm, name) {
		if has(p.Attributes, match) {
			n += p.Value
		}
	}
	return n
}

func has(set attribute.Set, match []attribute.KeyValue) bool {
	for _, kv := range match {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// points returns the data points of the metric called name, of type D.
func points[D metricdata.Sum[int64] | metricdata.Gauge[int64]](t *testing.T, rm metricdata.ResourceMetrics, name string) []metricdata.DataPoint[int64] {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				d, ok := m.Data.(D)
				require.True(t, ok, "%s is a %T", name, m.Data)
				switch d := any(d).(type) {
				case metricdata.Sum[int64]:
					return d.DataPoints
				case metricdata.Gauge[int64]:
					return d.DataPoints
				}
			}
		}
	}
	return nil
}

// histogramCount is how many values the histogram called name recorded with
// attributes including match.
func histogramCount(rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range h.DataPoints {
					if has(p.Attributes, match) {
						n += p.Count
					}
				}
			}
		}
	}
	return n
}

// TestMetricsContended runs a known number of Lock/Unlock on one lock from
// goroutines of two Clients and reads the metrics back: one acquisition per
// Lock, hand-offs (local passes and through Redis), no errors until a
// TryLock on the held lock fails (locked), one hold per Lock in the hold
// histogram, and gauges of nothing held and nothing waiting.
func TestMetricsContended(t *testing.T) {
	const nClients, perClient, rounds = 2, 4, 25
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	cs := clients(t, nClients, relockotel.WithMeterProvider(mp),
		relockotel.WithNameLabel(func(name string) string { return strings.SplitN(name, "-", 2)[0] }))
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range nClients * perClient {
		m := cs[i%nClients].Mutex("hot-1")
		wg.Go(func() {
			for range rounds {
				lockCtx, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(lockCtx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	held, err := cs[0].Mutex("hot-1").Lock(ctx)
	require.NoError(t, err)
	_, err = cs[1].Mutex("hot-1").TryLock(ctx)
	require.ErrorIs(t, err, rlock.ErrLocked)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	const locks = nClients*perClient*rounds + 1
	name := relockotel.AttrName.String("hot")
	require.EqualValues(t, locks, sum(t, rm, "relock.acquisitions", name, relockotel.AttrKind.String("mutex")))
	local := sum(t, rm, "relock.handoffs", relockotel.AttrHandOff.String("local_pass"))
	remote := sum(t, rm, "relock.handoffs", relockotel.AttrHandOff.String("hand_off"))
	t.Logf("local passes %d, hand-offs through Redis %d", local, remote)
	require.Positive(t, local+remote)
	require.EqualValues(t, local+remote, histogramCount(rm, "relock.handoff.duration"))
	require.EqualValues(t, 1, sum(t, rm, "relock.errors", relockotel.AttrError.String("locked"), relockotel.AttrOp.String("TryLock")))
	require.EqualValues(t, 1, sum(t, rm, "relock.errors"), "errors other than the TryLock")
	require.EqualValues(t, locks+1, histogramCount(rm, "relock.wait.duration", name))
	require.EqualValues(t, locks-1, histogramCount(rm, "relock.hold.duration", relockotel.AttrEnd.String("released")))
	require.Zero(t, sum(t, rm, "relock.lease_losses")+sum(t, rm, "relock.abandons"))

	gauge := func(name string) int64 {
		var n int64
		for _, p := range points[metricdata.Gauge[int64]](t, rm, name) {
			n += p.Value
		}
		return n
	}
	require.EqualValues(t, 1, gauge("relock.held"), "the lock held now")
	require.Zero(t, gauge("relock.waiting"))
	require.Len(t, points[metricdata.Gauge[int64]](t, rm, "relock.held"), nClients, "one point per Client")
	require.NoError(t, cs[0].Mutex("hot-1").Unlock(held))
}

// TestSpans checks the spans of Lock, Unlock and a failed TryLock: named
// after the method, under the caller's span, with the lock name and whether
// the call waited, and the failure's class.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cs := clients(t, 2, relockotel.WithTracerProvider(tp))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	lockCtx, err := cs[0].Mutex("span").Lock(ctx)
	require.NoError(t, err)
	_, err = cs[1].Mutex("span").TryLock(ctx)
	require.ErrorIs(t, err, rlock.ErrLocked)
	waited := make(chan error, 1)
	go func() {
		l, err := cs[1].Mutex("span").Lock(ctx)
		if err == nil {
			err = cs[1].Mutex("span").Unlock(l)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return cs[1].Stats().Waiting == 1 }, 10e9, 1e6)
	require.NoError(t, cs[0].Mutex("span").Unlock(lockCtx))
	require.NoError(t, <-waited)
	parent.End()

	type want struct {
		name   string
		waited bool
		err    bool
	}
	var got []want
	for _, s := range rec.Ended() {
		if s.Name() == "parent" {
			continue
		}
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), s.Name())
		attrs := attribute.NewSet(s.Attributes()...)
		v, ok := attrs.Value(relockotel.AttrName)
		require.True(t, ok, s.Name())
		require.Equal(t, "span", v.AsString())
		w, _ := attrs.Value(relockotel.AttrWaited)
		got = append(got, want{s.Name(), w.AsBool(), s.Status().Code == codes.Error})
		require.False(t, s.EndTime().Before(s.StartTime()))
	}
	require.ElementsMatch(t, []want{
		{"Mutex.Lock", false, false}, {"Mutex.TryLock", false, true},
		{"Mutex.Unlock", false, false}, {"Mutex.Lock", true, false}, {"Mutex.Unlock", false, false},
	}, got)
}

// TestSpanViaOnlyOnSuccess: an acquisition that got the lock says how on its
// span (relock.via); a failed one (TryLock of a held lock, a Lock whose
// context ended in the queue) got nothing, and its span carries no
// relock.via: Event.Via's zero value, which reads "redis", used to be set.
func TestSpanViaOnlyOnSuccess(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cs := clients(t, 2, relockotel.WithTracerProvider(tp))
	ctx := context.Background()
	lockCtx, err := cs[0].FairMutex("via").Lock(ctx)
	require.NoError(t, err)
	_, err = cs[1].FairMutex("via").TryLock(ctx)
	require.ErrorIs(t, err, rlock.ErrLocked)
	short, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		_, err := cs[1].FairMutex("via").Lock(short)
		failed <- err
	}()
	require.Eventually(t, func() bool { return cs[1].Stats().Waiting == 1 }, 10e9, 1e6)
	cancel()
	require.Error(t, <-failed)
	require.NoError(t, cs[0].FairMutex("via").Unlock(lockCtx))

	var ok, bad int
	for _, s := range rec.Ended() {
		if s.Name() != "Mutex.Lock" && s.Name() != "Mutex.TryLock" {
			continue
		}
		attrs := attribute.NewSet(s.Attributes()...)
		v, has := attrs.Value(relockotel.AttrVia)
		if s.Status().Code == codes.Error {
			bad++
			require.False(t, has, "failed %s span has relock.via=%q", s.Name(), v.AsString())
		} else {
			ok++
			require.True(t, has, "%s span of an acquisition without relock.via", s.Name())
			require.Equal(t, "redis", v.AsString())
		}
	}
	require.Equal(t, 1, ok, "acquisitions that got the lock")
	require.Equal(t, 2, bad, "failed acquisitions")
}

// TestWithoutNames leaves the lock name off spans and metrics.
func TestWithoutNames(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := clients(t, 1, relockotel.WithTracerProvider(tp), relockotel.WithoutNames())[0]
	lockCtx, err := c.Mutex("secret-name").Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, c.Mutex("secret-name").Unlock(lockCtx))
	require.Len(t, rec.Ended(), 2)
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			require.NotEqual(t, relockotel.AttrName, kv.Key)
		}
	}
}
