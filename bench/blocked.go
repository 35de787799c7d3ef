package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/relockio/relock/internal/measure"
)

// The blocked point: the bench process takes a lock with a client of the
// contender and keeps it; K waiters, each a client with one goroutine in its
// own worker process, call Lock on it and stay blocked. After blockedSettle
// (their first attempt, subscription and queueing done, and every idle
// connection past the 1s after which rueidis starts its keep-alive PINGs) the
// window opens:
// the INFO commandstats delta over the window, divided by K and by its
// length, is what a blocked waiter costs Redis per second. PING (rueidis's
// keep-alive on idle connections) is reported apart from everything else.
// Every client of the contender counts, the holder's included (one of K+1:
// a watchdog renewal, its connections' PINGs); the bench's own connections
// send no PINGs (newRawClient) and their INFO is left out. Then the holder
// unlocks and the waiters take the lock in turn, each once.

// blockedSettle is how long the waiters get to block before the window: a
// rueidis connection PINGs at the first tick of its 1s keep-alive timer that
// saw no traffic for a whole tick, so 2s after the waiters' last command
// every idle connection is in its steady state.
const blockedSettle = 2 * time.Second

// runBlocked runs contender c at the blocked point pt.
func (b *bench) runBlocked(ctx context.Context, pt Point, c Contender, round int) (Result, error) {
	began := time.Now()
	b.seq++
	prefix := fmt.Sprintf("%s:%d:%s", b.prefix, b.seq, c.Slug)
	ws, err := b.pool.get(pt.Workers)
	if err != nil {
		return Result{}, err
	}
	var holder LockClient
	var held Held
	holdCtx, cancelHold := context.WithTimeout(ctx, b.cfg.wait)
	defer cancelHold()
	release := func() error {
		var err error
		if held != nil {
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = held.Unlock(uctx)
			cancel()
			held = nil
		}
		if holder != nil {
			_ = holder.Close()
			holder = nil
		}
		return err
	}
	defer release()
	fail := func(err error) (Result, error) {
		_ = release()
		b.pool.discard(ws)
		return Result{}, fmt.Errorf("%s at %s: %w", c.Slug, pt.Label, err)
	}

	baseConns, err := b.contenderConns(ctx)
	if err != nil {
		return fail(err)
	}
	if holder, err = c.Open(ctx, OpenEnv{Addr: b.addr, Prefix: prefix, Requests: new(measure.Requests)}); err != nil {
		return fail(fmt.Errorf("holder: open: %w", err))
	}
	counterFile, err := newCounterFile(pt.Locks)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(counterFile)
	perWorker := pt.Goroutines / pt.Workers
	for i, w := range ws {
		job := Job{
			Contender:  c.Slug,
			Addr:       b.addr,
			Prefix:     prefix,
			Worker:     i,
			Clients:    pt.ClientsPerWorker,
			Goroutines: perWorker,
			FirstG:     i * perWorker,
			Locks:      1,
			Once:       true,
			Counters:   counterFile,
			// The monitor probes for stuck waiters only after this: well
			// after the window, so that its commands stay out of it.
			Duration:   blockedSettle + pt.Window + time.Second,
			Wait:       b.cfg.wait,
			StuckAfter: b.cfg.stuckAfter,
			DrainLimit: b.cfg.drainLimit,
		}
		if err := w.send(toWorker{Cmd: "job", Job: &job}); err != nil {
			return fail(err)
		}
	}
	if err := recvAll(ctx, ws, "ready", time.Minute); err != nil {
		return fail(err)
	}
	// Taken only now, so that the hold (settle + window) stays short of
	// redsync's 8s expiry.
	if held, err = holder.Lock(holdCtx, lockName(0)); err != nil {
		return fail(fmt.Errorf("holder: lock: %w", err))
	}
	for _, w := range ws {
		if err := w.send(toWorker{Cmd: "go"}); err != nil {
			return fail(err)
		}
	}
	if err := sleepCtx(ctx, blockedSettle); err != nil {
		return fail(err)
	}
	conns, err := b.contenderConns(ctx)
	if err != nil {
		return fail(err)
	}
	before, err := b.snapshot(ctx)
	if err != nil {
		return fail(err)
	}
	t0 := mono()
	if err := sleepCtx(ctx, pt.Window); err != nil {
		return fail(err)
	}
	after, err := b.snapshot(ctx)
	if err != nil {
		return fail(err)
	}
	t1 := mono()
	released := mono()
	if err := release(); err != nil {
		return fail(fmt.Errorf("holder: unlock: %w", err))
	}

	results := make([]WorkerResult, len(ws))
	var mu sync.Mutex
	err = recvEach(ctx, ws, "result", pt.Window+b.cfg.drainLimit+time.Minute, func(i int, m fromWorker) {
		mu.Lock()
		results[i] = *m.Result
		mu.Unlock()
	})
	if err != nil {
		return fail(err)
	}
	for _, w := range ws {
		if err := w.send(toWorker{Cmd: "close"}); err != nil {
			return fail(err)
		}
	}
	if err := recvAll(ctx, ws, "closed", time.Minute); err != nil {
		return fail(err)
	}
	counters, err := readCounterFile(counterFile, pt.Locks)
	if err != nil {
		return fail(err)
	}
	d := delta(before, after)
	r := aggregate(pt, c.Slug, results, d, counters)
	r.Round = round
	r.Seconds = time.Since(began).Seconds()

	bc := &BlockedCost{Waiters: pt.Goroutines, WindowS: float64(t1-t0) / 1e9, Commands: map[string]int64{},
		ConnsPerClient: float64(conns-baseConns) / float64(pt.Clients()+1)}
	var ping, other int64
	for name, n := range d.commands {
		switch name {
		case "info": // the bench's snapshots
			continue
		case "ping":
			ping += n
		default:
			other += n
		}
		bc.Commands[name] = n
	}
	if bc.WindowS > 0 && bc.Waiters > 0 {
		bc.PingPerWaiterS = float64(ping) / float64(bc.Waiters) / bc.WindowS
		bc.CmdPerWaiterS = float64(other) / float64(bc.Waiters) / bc.WindowS
	}
	for _, w := range results {
		for _, rec := range w.Records {
			if rec[recAcq] < released {
				bc.Early++
			}
		}
	}
	r.Blocked = bc
	return r, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
