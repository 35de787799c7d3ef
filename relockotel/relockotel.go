package relockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/relockio/relock/rlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/relockio/relock/relockotel"

// Attribute keys.
const (
	AttrKind    = attribute.Key("relock.lock.kind") // mutex, rwmutex-read, rwmutex-write, semaphore
	AttrName    = attribute.Key("relock.lock.name") // see WithNameLabel
	AttrOp      = attribute.Key("relock.op")        // Lock, TryLock, Unlock, ...
	AttrWaited  = attribute.Key("relock.waited")
	AttrVia     = attribute.Key("relock.via")       // redis, local_pass, hand_off, kept, reentry; successful acquisitions only
	AttrHandOff = attribute.Key("relock.handoff")   // local_pass, hand_off
	AttrEnd     = attribute.Key("relock.hold.end")  // released, lost, abandoned, closed
	AttrError   = attribute.Key("error.type")       // locked, unavailable, permission, other
	AttrFinal   = attribute.Key("relock.final")     // a release that ended the hold
	AttrClient  = attribute.Key("relock.client.id") // gauges only
)

// Option configures NewObserver and NewClient.
type Option func(o *config)

type config struct {
	mp        metric.MeterProvider
	tp        trace.TracerProvider
	mAttrs    []attribute.KeyValue
	tAttrs    []attribute.KeyValue
	label     func(name string) string
	spanNames bool
}

// WithMeterProvider sets the MeterProvider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *config) { o.mp = mp }
}

// WithTracerProvider sets the TracerProvider. Default:
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *config) { o.tp = tp }
}

// MetricAttrs sets attributes added to every metric.
func MetricAttrs(attrs ...attribute.KeyValue) Option {
	return func(o *config) { o.mAttrs = attrs }
}

// TraceAttrs sets attributes added to every span.
func TraceAttrs(attrs ...attribute.KeyValue) Option {
	return func(o *config) { o.tAttrs = attrs }
}

// WithNameLabel maps a lock or semaphore name to the value of the
// relock.lock.name attribute of metrics and spans; an empty value leaves the
// attribute out. Names are the program's choice and may be unbounded: label
// must map them to a small set (a prefix, a kind of resource), or every name
// becomes a time series. Default: metrics carry no name, spans the name
// itself.
func WithNameLabel(label func(name string) string) Option {
	return func(o *config) { o.label = label }
}

// WithoutNames leaves the lock name off the spans too (and off metrics,
// unless WithNameLabel says otherwise).
func WithoutNames() Option {
	return func(o *config) { o.spanNames = false }
}

// Observer is an rlock.Observer that records OpenTelemetry metrics and spans.
// Make it with NewObserver, give it to rlock.New with rlock.WithObserver, and
// register the Client's gauges with Observe (NewClient does all three).
type Observer struct {
	cfg    config
	meter  metric.Meter
	tracer trace.Tracer

	wait, hold, handOff                 metric.Float64Histogram
	acquisitions, handOffs              metric.Int64Counter
	leaseLosses, abandons, errorsByType metric.Int64Counter
	err                                 error // the first instrument that failed

	mu   sync.RWMutex
	sets map[setKey]*pointAttrs // see attrs
}

var _ rlock.Observer = (*Observer)(nil)

// NewObserver makes the instruments on the configured MeterProvider.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := config{spanNames: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	o := &Observer{cfg: cfg, meter: cfg.mp.Meter(ScopeName), tracer: cfg.tp.Tracer(ScopeName), sets: make(map[setKey]*pointAttrs)}
	if err := o.instruments(); err != nil {
		return nil, err
	}
	return o, nil
}

// durationBuckets (seconds) span a local pass (microseconds) to a long wait.
var durationBuckets = []float64{0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func (o *Observer) instruments() error {
	m := o.meter
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		o.note(err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		o.note(err)
		return c
	}
	o.wait = hist("relock.wait.duration", "Time an acquisition call (Lock, Acquire, ...) took, waiting included.")
	o.hold = hist("relock.hold.duration", "Time a lock or permits were held, from acquisition to the end of the hold.")
	o.handOff = hist("relock.handoff.duration", "Hand-off latency: from a local pass to the new hold, or from the wake-up of a waiter granted the lock by Redis to its hold.")
	o.acquisitions = counter("relock.acquisitions", "{acquisition}", "Successful acquisition calls.")
	o.handOffs = counter("relock.handoffs", "{handoff}", "Acquisitions handed the lock after waiting: by a goroutine of the Client (local_pass) or by Redis (hand_off).")
	o.leaseLosses = counter("relock.lease_losses", "{hold}", "Holds that ended without their release: the lease was lost.")
	o.abandons = counter("relock.abandons", "{hold}", "Holds given up after a command of unknown outcome.")
	o.errorsByType = counter("relock.errors", "{error}", "Failed lock calls, by error.type: locked, unavailable, permission, other.")
	return o.err
}

func (o *Observer) note(err error) {
	if err != nil && o.err == nil {
		o.err = err
	}
}

// Observe registers the gauges of c: relock.held (holds live now) and
// relock.waiting (acquisition calls waiting now), read from c.Stats at each
// collection and tagged with the Client's ID. Unregister them when c closes.
func (o *Observer) Observe(c *rlock.Client) (metric.Registration, error) {
	held, err1 := o.meter.Int64ObservableGauge("relock.held", metric.WithUnit("{hold}"), metric.WithDescription("Holds of locks and permits live now, per Client."))
	waiting, err2 := o.meter.Int64ObservableGauge("relock.waiting", metric.WithUnit("{call}"), metric.WithDescription("Acquisition calls blocked waiting now, per Client."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{AttrClient.String(c.ID())}, o.cfg.mAttrs...)...))
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		s := c.Stats()
		obs.ObserveInt64(held, s.Held, attrs)
		obs.ObserveInt64(waiting, s.Waiting, attrs)
		return nil
	}, held, waiting)
}

// NewClient returns an rlock.Client on rc (see rlock.New, which lockOpts
// configure) whose locks and semaphores are reported through OpenTelemetry.
// Its gauges stay registered until the MeterProvider shuts down; a closed
// Client reports no holds and no waits.
func NewClient(rc rueidis.Client, lockOpts []rlock.Option, opts ...Option) (*rlock.Client, error) {
	o, err := NewObserver(opts...)
	if err != nil {
		return nil, fmt.Errorf("relockotel: %w", err)
	}
	c, err := rlock.New(rc, append(append([]rlock.Option(nil), lockOpts...), rlock.WithObserver(o))...)
	if err != nil {
		return nil, err
	}
	if _, err := o.Observe(c); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("relockotel: %w", err)
	}
	return c, nil
}

// metricName is the name attribute of metrics, if any.
func (o *Observer) metricName(name string) (attribute.KeyValue, bool) {
	if o.cfg.label == nil {
		return attribute.KeyValue{}, false
	}
	if l := o.cfg.label(name); l != "" {
		return AttrName.String(l), true
	}
	return attribute.KeyValue{}, false
}

// spanName is the name attribute of spans, if any.
func (o *Observer) spanName(name string) (attribute.KeyValue, bool) {
	if o.cfg.label != nil {
		return o.metricName(name)
	}
	return AttrName.String(name), o.cfg.spanNames
}

// setKey names an attribute set of metric points: the kind, the name label
// and up to two more attributes.
type setKey struct {
	kind, name             string
	key1, val1, key2, val2 string
}

// pointAttrs are the options that give a metric point its attribute set,
// made once: passed as a slice, they cost no allocation per point.
type pointAttrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// maxSets bounds the cache of attribute sets: a name label of more values
// than that (which makes as many time series) builds its sets afresh.
const maxSets = 4096

// attrs returns the attribute set of a metric point: kind, the name label,
// extra (at most two) and MetricAttrs. Sets are cached: building one costs
// allocations and a sort, on every lock call otherwise.
func (o *Observer) attrs(e *rlock.Event, extra ...attribute.KeyValue) *pointAttrs {
	name, hasName := o.metricName(e.Name)
	k := setKey{kind: e.Kind, name: name.Value.AsString()}
	if len(extra) > 0 {
		k.key1, k.val1 = string(extra[0].Key), extra[0].Value.Emit()
	}
	if len(extra) > 1 {
		k.key2, k.val2 = string(extra[1].Key), extra[1].Value.Emit()
	}
	o.mu.RLock()
	opt, ok := o.sets[k]
	o.mu.RUnlock()
	if ok {
		return opt
	}
	kv := make([]attribute.KeyValue, 0, 4+len(o.cfg.mAttrs))
	kv = append(kv, AttrKind.String(e.Kind))
	if hasName {
		kv = append(kv, name)
	}
	kv = append(kv, extra...)
	kv = append(kv, o.cfg.mAttrs...)
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	opt = &pointAttrs{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	o.mu.Lock()
	if len(o.sets) < maxSets {
		o.sets[k] = opt
	}
	o.mu.Unlock()
	return opt
}

// Acquired records an acquisition call: rlock.Observer. A call that got the
// lock has its span and acquisition counted with how it got it (AttrVia); a
// failed one got nothing, so its span carries no AttrVia (Event.Via is then
// its zero value, which would read "redis") and it counts as an error.
func (o *Observer) Acquired(ctx context.Context, e *rlock.Event) {
	if e.Err != nil {
		o.span(ctx, e, AttrWaited.Bool(e.Waited))
		o.errorsByType.Add(ctx, 1, o.attrs(e, AttrOp.String(e.Op), AttrError.String(e.Class.String())).add...)
		o.wait.Record(ctx, e.Duration.Seconds(), o.attrs(e, AttrWaited.Bool(e.Waited), AttrError.String(e.Class.String())).rec...)
		return
	}
	o.span(ctx, e, AttrWaited.Bool(e.Waited), AttrVia.String(e.Via.String()))
	o.acquisitions.Add(ctx, 1, o.attrs(e, AttrVia.String(e.Via.String())).add...)
	o.wait.Record(ctx, e.Duration.Seconds(), o.attrs(e, AttrWaited.Bool(e.Waited)).rec...)
	if e.Via == rlock.ViaLocalPass || e.Via == rlock.ViaHandOff {
		a := o.attrs(e, AttrHandOff.String(e.Via.String()))
		o.handOffs.Add(ctx, 1, a.add...)
		o.handOff.Record(ctx, e.HandOff.Seconds(), a.rec...)
	}
}

// Released records a release call: rlock.Observer.
func (o *Observer) Released(ctx context.Context, e *rlock.Event) {
	o.span(ctx, e, AttrFinal.Bool(e.Final))
	if e.Err != nil {
		o.errorsByType.Add(ctx, 1, o.attrs(e, AttrOp.String(e.Op), AttrError.String(e.Class.String())).add...)
	}
}

// HoldEnded records the end of a hold: rlock.Observer.
func (o *Observer) HoldEnded(e *rlock.Event) {
	ctx := context.Background()
	end := "released"
	switch {
	case e.Abandoned:
		end = "abandoned"
		o.abandons.Add(ctx, 1, o.attrs(e).add...)
	case e.Lost:
		end = "lost"
		o.leaseLosses.Add(ctx, 1, o.attrs(e).add...)
	case errors.Is(e.Err, rlock.ErrClosed):
		end = "closed"
	}
	o.hold.Record(ctx, e.Duration.Seconds(), o.attrs(e, AttrEnd.String(end)).rec...)
}

// span records the call of e as a span under ctx's, from e.Start for
// e.Duration. Attributes are set only on a span that records (sampled).
func (o *Observer) span(ctx context.Context, e *rlock.Event, extra ...attribute.KeyValue) {
	_, span := o.tracer.Start(ctx, spanName(e), trace.WithTimestamp(e.Start), internalSpan)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrKind.String(e.Kind))
	if n, ok := o.spanName(e.Name); ok {
		span.SetAttributes(n)
	}
	span.SetAttributes(extra...)
	span.SetAttributes(o.cfg.tAttrs...)
	if e.Err != nil {
		span.SetAttributes(AttrError.String(e.Class.String()))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Duration)))
}

var internalSpan = trace.WithSpanKind(trace.SpanKindInternal)

// spanName is Type.Method: Mutex.Lock, RWMutex.RLock, Semaphore.Acquire.
func spanName(e *rlock.Event) string {
	if n, ok := spanNames[[2]string{e.Kind, e.Op}]; ok {
		return n
	}
	return e.Kind + "." + e.Op
}

// spanNames are the span names of the known calls, made once.
var spanNames = func() map[[2]string]string {
	m := make(map[[2]string]string)
	add := func(kind, typ string, ops ...string) {
		for _, op := range ops {
			m[[2]string{kind, op}] = typ + "." + op
		}
	}
	add("mutex", "Mutex", "Lock", "TryLock", "Unlock")
	add("rwmutex-read", "RWMutex", "RLock", "TryRLock", "RUnlock")
	add("rwmutex-write", "RWMutex", "Lock", "TryLock", "Unlock")
	add("semaphore", "Semaphore", "Acquire", "TryAcquire", "Release")
	return m
}()
