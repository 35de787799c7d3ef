package rlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// BenchmarkCrossClientHandOff takes apart a hand-off between two Clients of
// one process after an idle hold (10-19ms, like bench/'s handoff-xproc), on a
// private Redis, beside the bare pub/sub floor after the same idle:
//
//	go test -run '^$' -bench CrossClientHandOff -benchtime 300x ./rlock
//
// It reports medians in µs: handoff (Unlock called to the waiter's Lock
// returned), unlock (the releaser's Unlock call), floor (PUBLISH called to its
// receipt on another rueidis client's dedicated connection), publish-rtt (that
// PUBLISH call), and script-server (the acquire and release scripts' own time
// in Redis, from SLOWLOG). The sleeps make the idle pattern; they synchronise
// nothing. Sub-benchmarks: "eval", the defaults (the scripts sent by
// EVALSHA), and "functions", WithRedisFunctions(true).
func BenchmarkCrossClientHandOff(b *testing.B) {
	for _, functions := range []bool{false, true} {
		b.Run(map[bool]string{true: "functions", false: "eval"}[functions], func(b *testing.B) {
			benchCrossClientHandOff(b, rlock.WithRedisFunctions(functions))
		})
	}
}

func benchCrossClientHandOff(b *testing.B, opt rlock.Option) {
	srv := redistest.New(b)
	ctx := context.Background()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(b), ":")
	newClient := func() *rlock.Client {
		c, err := rlock.New(redistest.Client(b, srv), rlock.WithKeyPrefix(prefix), opt)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	raw := redistest.Client(b, srv)
	floorCh := prefix + ":floor"
	received := make(chan time.Time, 1)
	sub, closeSub := redistest.Client(b, srv).Dedicate()
	b.Cleanup(closeSub)
	sub.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) { received <- time.Now() }})
	if err := sub.Do(ctx, sub.B().Subscribe().Channel(floorCh).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	holder, waiter := newClient().Mutex("handoff"), newClient().Mutex("handoff")
	held, err := holder.Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	slowlog := func(args ...string) {
		if err := raw.Do(ctx, raw.B().Arbitrary(args...).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	slowlog("CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", "100000")
	slowlog("SLOWLOG", "RESET")
	var handoff, unlock, floor, publish []time.Duration
	b.ResetTimer()
	for i := range b.N {
		idle := time.Duration(10+i%10) * time.Millisecond
		got := make(chan context.Context, 1)
		at := make(chan time.Time, 1)
		go func() {
			l, err := waiter.Lock(ctx)
			if err != nil {
				b.Error(err)
			}
			at <- time.Now()
			got <- l
		}()
		time.Sleep(idle)
		start := time.Now()
		if err := holder.Unlock(held); err != nil {
			b.Fatal(err)
		}
		unlock = append(unlock, time.Since(start))
		handoff = append(handoff, (<-at).Sub(start))
		held = <-got
		holder, waiter = waiter, holder

		time.Sleep(idle)
		start = time.Now()
		if err := raw.Do(ctx, raw.B().Publish().Channel(floorCh).Message("x").Build()).Error(); err != nil {
			b.Fatal(err)
		}
		publish = append(publish, time.Since(start))
		floor = append(floor, (<-received).Sub(start))
	}
	b.StopTimer()
	_ = holder.Unlock(held)
	entries, err := raw.Do(ctx, raw.B().SlowlogGet().Count(100000).Build()).ToArray()
	if err != nil {
		b.Fatal(err)
	}
	var scripts []time.Duration
	for _, e := range entries {
		f, _ := e.ToArray()
		if len(f) < 4 {
			continue
		}
		args, _ := f[3].AsStrSlice()
		if us, err := f[2].AsInt64(); err == nil && len(args) > 0 && redistest.IsScript(args) {
			scripts = append(scripts, time.Duration(us)*time.Microsecond)
		}
	}
	median := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	b.ReportMetric(median(handoff), "handoff-µs")
	b.ReportMetric(median(unlock), "unlock-µs")
	b.ReportMetric(median(floor), "floor-µs")
	b.ReportMetric(median(publish), "publish-rtt-µs")
	b.ReportMetric(median(scripts), "script-server-µs")
	b.ReportMetric(0, "ns/op")
}
