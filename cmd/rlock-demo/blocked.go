package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The blocked-waiters phase: counting of the waiters' requests starts this
// long after they were launched (or a quarter of the hold, if shorter), so that
// every waiter has made its first attempt and is waiting by then.
const blockedSettle = 200 * time.Millisecond

// blockedDrainLimit bounds how long the waiters may take to get the lock once
// the holder has released it; a lock that needs longer is broken.
const blockedDrainLimit = time.Minute

// errDrainTooLong ends the blocked-waiters phase when blockedDrainLimit ran out.
var errDrainTooLong = errors.New("waiters still not served")

// blockedResult is what the blocked-waiters phase measured.
type blockedResult struct {
	name     string
	waiters  int
	window   time.Duration // the counted part of the hold
	reqs     int64         // requests all clients sent during window
	wake     time.Duration // holder's Unlock called -> first waiter's Lock returned
	drain    time.Duration // holder's Unlock called -> last waiter's Lock returned
	acquired int64         // the holder's acquisition and every waiter's
	counter  int64
}

// perWaiterRate is the requests each blocked waiter sent per second.
func (b *blockedResult) perWaiterRate() float64 {
	if b.waiters == 0 || b.window <= 0 {
		return 0
	}
	return float64(b.reqs) / float64(b.waiters) / b.window.Seconds()
}

func (b *blockedResult) lost() int64 { return b.acquired - b.counter }

// runBlocked takes the lock on goroutine 0 and keeps it for s.block while
// every other goroutine (s.clients*s.goroutines-1 of them, spread over the
// clients as in the hot phase) blocks in Lock. It counts the requests sent
// while they wait, then releases the lock and times how soon the first waiter
// gets it. Every waiter then takes the lock once, incrementing the counter,
// and releases it.
func runBlocked(ctx context.Context, s settings, c contender, r *rig) (*blockedResult, error) {
	counter := s.prefix + ":counter:" + c.slug + ":blocked"
	if err := resetCounter(ctx, r.raw[0], counter); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.block+blockedDrainLimit, errDrainTooLong)
	defer cancel()

	unlock, err := r.lockers[0].Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	held := time.Now()
	holderErr := increment(context.WithoutCancel(ctx), r.raw[0], counter)

	res := &blockedResult{name: c.name, waiters: s.clients*s.goroutines - 1}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		acquiredAt = make([]time.Time, res.waiters)
		fail       error
		served     atomic.Int64 // waiters that had the lock, for progress
	)
	launched := time.Now()
	for w := range res.waiters {
		g := w + 1 // goroutine 0 is the holder
		wg.Go(func() {
			rc, l := r.raw[g%s.clients], r.lockers[g%s.clients]
			unlock, err := l.Lock(ctx)
			if err == nil {
				acquiredAt[w] = time.Now()
				served.Add(1)
				err = increment(context.WithoutCancel(ctx), rc, counter)
				time.Sleep(s.hold)
				err = errors.Join(err, unlock())
			}
			if err != nil {
				mu.Lock()
				fail = errors.Join(fail, fmt.Errorf("waiter %d: %w", g, err))
				mu.Unlock()
			}
		})
	}

	// Count from when everyone is waiting until just before the release. The
	// holder releases the lock whatever happens (early when interrupted), so
	// that no waiter is left waiting for a lock nobody releases.
	settle := min(blockedSettle, s.block/4)
	sleepUntil(ctx, launched.Add(settle))
	from, t0 := r.reqs.Total(), time.Now()
	sleepUntil(ctx, held.Add(s.block))
	to, t1 := r.reqs.Total(), time.Now()
	// Timed from just before Unlock is called: a waiter can have the lock
	// before Unlock returns (the release hands it over in Redis, or passes it
	// to a goroutine of the same client, and then answers the holder), so
	// timing from the return could come out negative. No waiter can have it
	// before the call, so these times cannot; they include the release's own
	// round trip.
	releasing := time.Now()
	holderErr = errors.Join(holderErr, unlock())
	waitReporting(&wg, res.waiters, &served)

	if err := errors.Join(holderErr, fail); err != nil {
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errDrainTooLong) {
			return nil, ctx.Err() // interrupted
		}
		return nil, err
	}
	res.window, res.reqs = t1.Sub(t0), to-from
	res.acquired = int64(res.waiters) + 1
	if res.waiters > 0 {
		first := slices.MinFunc(acquiredAt, time.Time.Compare)
		if first.Before(releasing) {
			return nil, fmt.Errorf("a waiter had the lock %v before the holder released it: two holders at once", releasing.Sub(first))
		}
		res.wake = first.Sub(releasing)
		res.drain = slices.MaxFunc(acquiredAt, time.Time.Compare).Sub(releasing)
	}
	if res.counter, err = readCounter(ctx, r.raw[0], counter); err != nil {
		return nil, err
	}
	return res, nil
}

// waitReporting waits for wg, saying every few seconds how many of the
// waiters had the lock (served counts them), so that a slow drain (a spin
// loop's, on a loaded machine) does not look like a hang.
func waitReporting(wg *sync.WaitGroup, waiters int, served *atomic.Int64) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			fmt.Printf("  ... %d of %d waiters served so far\n", served.Load(), waiters)
		}
	}
}

// sleepUntil sleeps until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
