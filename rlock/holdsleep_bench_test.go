package rlock_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// BenchmarkHotHoldSleep is bench-kinds' fifo point taken apart: one lock, 4
// Clients x 4 goroutines in one process, each holding it for
// time.Sleep(1ms) and taking it again at once, for 2s per run, with the
// default Mutex, its FIFO mode and the SET NX spin lock. Besides acq/s it
// reports, per acquisition, the median time from an Unlock call to the next
// holder's Lock returning (handoff-us) and how long the holder's
// time.Sleep(1ms) really lasted (sleep-us): in FIFO mode the releaser's next
// Lock queues in Redis while the next holder sleeps, and a reply that
// arrives during a sleep shorter than a millisecond puts its end a whole
// millisecond after it (see BenchmarkSleepAfterRoundTrip).
func BenchmarkHotHoldSleep(b *testing.B) {
	for _, kind := range []string{"default", "fifo", "spin"} {
		b.Run(kind, func(b *testing.B) {
			var opts []rlock.Option
			if kind == "fifo" {
				opts = append(opts, rlock.WithFIFO())
			}
			cs, srv := benchClients(b, 4, opts...)
			spinKey := redistest.KeyPrefix(b) + "hot"
			for b.Loop() {
				holdSleepRun(b, cs, srv, kind, spinKey)
			}
		})
	}
}

// holdSleepRun is one 2s run of BenchmarkHotHoldSleep.
func holdSleepRun(b *testing.B, cs []*rlock.Client, srv *redistest.Server, kind, spinKey string) {
	const (
		goroutines = 16
		run        = 2 * time.Second
	)
	type held struct{ got, released time.Time }
	ctx := context.Background()
	var (
		mu    sync.Mutex
		holds []held
		wg    sync.WaitGroup
	)
	end := time.Now().Add(run)
	for g := range goroutines {
		m := cs[g%len(cs)].Mutex("hot")
		spin := measure.NewSpinLocker(redistest.Client(b, srv), "g"+strconv.Itoa(g), 30*time.Second)
		wg.Go(func() {
			for time.Now().Before(end) {
				var unlock func() error
				if kind == "spin" {
					u, err := spin.Lock(ctx, spinKey)
					if err != nil {
						b.Error(err)
						return
					}
					unlock = func() error { return u(ctx) }
				} else {
					lc, err := m.Lock(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					unlock = func() error { return m.Unlock(lc) }
				}
				got := time.Now()
				time.Sleep(time.Millisecond) // the critical section
				released := time.Now()
				if err := unlock(); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				holds = append(holds, held{got, released})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(holds) < 2 {
		b.Fatalf("%d acquisitions in %v", len(holds), run)
	}
	slices.SortFunc(holds, func(x, y held) int { return x.got.Compare(y.got) })
	var handoffs, sleeps []time.Duration
	for i := 1; i < len(holds); i++ {
		handoffs = append(handoffs, holds[i].got.Sub(holds[i-1].released))
		sleeps = append(sleeps, holds[i].released.Sub(holds[i].got))
	}
	b.ReportMetric(float64(len(holds))/run.Seconds(), "acq/s")
	b.ReportMetric(median(handoffs), "handoff-us")
	b.ReportMetric(median(sleeps), "sleep-us")
}

// median returns the median of d in microseconds.
func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2]) / float64(time.Microsecond)
}

// BenchmarkSleepAfterRoundTrip measures the Go runtime alone: a goroutine
// sleeps 1ms while another makes one round trip to Redis (a PING) that
// ends about mid after the sleep began. sleep-us is how long the sleep
// lasted: when every thread is idle, the runtime waits for its next timer in
// epoll with a timeout in whole milliseconds, at least one, so a reply that
// wakes it with less than a millisecond to go puts the timer's end a
// millisecond after the reply.
func BenchmarkSleepAfterRoundTrip(b *testing.B) {
	srv := redistest.New(b)
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	buf := make([]byte, 64)
	for _, mid := range []time.Duration{0, 100 * time.Microsecond, 300 * time.Microsecond, 600 * time.Microsecond} {
		b.Run("mid="+mid.String(), func(b *testing.B) {
			var sleeps []time.Duration
			for b.Loop() {
				slept := make(chan time.Duration)
				go func() {
					start := time.Now()
					time.Sleep(time.Millisecond)
					slept <- time.Since(start)
				}()
				if mid > 0 {
					for start := time.Now(); time.Since(start) < mid; {
						// busy: the round trip starts mid into the sleep
					}
					if _, err := conn.Write([]byte("PING\r\n")); err != nil {
						b.Fatal(err)
					}
					if _, err := conn.Read(buf); err != nil {
						b.Fatal(err)
					}
				}
				sleeps = append(sleeps, <-slept)
			}
			b.ReportMetric(median(sleeps), "sleep-us")
		})
	}
}
