// Package relockotel reports the locks and semaphores of an rlock.Client
// through OpenTelemetry: metrics (wait, hold and hand-off durations,
// acquisitions, hand-offs, lease losses, abandons, errors by class, and the
// holds and waits live now) and a span per Lock, Unlock, Acquire and Release.
//
// It is a module of its own, so that programs that do not use OpenTelemetry
// do not get it in their go.sum. It follows the conventions of rueidisotel:
// NewClient makes an instrumented Client; WithMeterProvider,
// WithTracerProvider, MetricAttrs and TraceAttrs choose where the figures go
// and what they carry.
//
//	c, err := relockotel.NewClient(rc, []rlock.Option{rlock.WithKeyPrefix("app")},
//		relockotel.WithNameLabel(func(name string) string { return strings.SplitN(name, ":", 2)[0] }))
//
// # Lock names and cardinality
//
// Lock names are chosen by the program, and may be unbounded ("order:1234"):
// every distinct value of an attribute is a time series of its own. By
// default the metrics carry no lock name; spans carry it (a span's
// attributes do not multiply series). WithNameLabel maps a name to a bounded
// label (its prefix, say) put on metrics and spans as relock.lock.name (an
// empty label leaves the attribute out); WithoutNames leaves it off the spans
// too. See docs/metrics.md in the repository for every metric, its unit and
// attributes.
package relockotel
