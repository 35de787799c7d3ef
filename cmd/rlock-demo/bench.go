package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// locker is one client's handle on the hot lock, as the benchmark loop sees it.
type locker interface {
	// Lock blocks until the lock is held or ctx ends; unlock releases it.
	Lock(ctx context.Context) (unlock func() error, err error)
	Close() error
}

// contender is a way of taking the hot lock: open gives client i its locker.
type contender struct {
	name string
	slug string // names the contender's counter key
	open func(rc rueidis.Client, i int) (locker, error)
}

// mutexLocker adapts an rlock.Mutex (and the Client it belongs to) to locker.
type mutexLocker struct {
	c *rlock.Client
	m *rlock.Mutex
}

func (l *mutexLocker) Lock(ctx context.Context) (func() error, error) {
	lockCtx, err := l.m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func() error { return l.m.Unlock(lockCtx) }, nil
}

func (l *mutexLocker) Close() error { return l.c.Close() }

// settings are the command-line knobs plus where the keys live.
type settings struct {
	duration   time.Duration
	hold       time.Duration
	block      time.Duration // how long the holder keeps the lock in the blocked-waiters phase
	clients    int
	goroutines int
	prefix     string // every key of the demo starts with it
}

// rig is one contender's clients: s.clients rueidis clients, each with its
// locker, and the count of the requests the lockers send.
type rig struct {
	raw     []rueidis.Client // the counter's GET and SET go here, uncounted
	lockers []locker         // built on counting wrappers of raw
	reqs    *measure.Requests
}

// runContender runs both phases for one contender, on one set of clients:
// everything it opened is closed when it returns.
func runContender(ctx context.Context, srv *redistest.Server, s settings, c contender) (hot *result, blk *blockedResult, err error) {
	// Separate rueidis clients, so that the contenders are separate processes
	// as far as Redis is concerned (own connections, own pub/sub).
	// Deferred in this order so that the lockers close first: an rlock.Client
	// must be closed before the rueidis client it runs on.
	r := &rig{reqs: new(measure.Requests)}
	defer func() {
		for _, rc := range r.raw {
			rc.Close()
		}
	}()
	defer func() {
		for _, l := range r.lockers {
			err = errors.Join(err, l.Close())
		}
	}()
	for i := range s.clients {
		rc, err := srv.Client()
		if err != nil {
			return nil, nil, err
		}
		r.raw = append(r.raw, rc)
		l, err := c.open(measure.CountingClient(rc, r.reqs), i)
		if err != nil {
			return nil, nil, err
		}
		r.lockers = append(r.lockers, l)
	}

	fmt.Printf("running %s: hot lock for %v...\n", c.name, s.duration)
	if hot, err = runHot(ctx, srv, s, c, r); err != nil {
		return nil, nil, err
	}
	fmt.Printf("running %s: blocked waiters for %v...\n", c.name, s.block)
	if blk, err = runBlocked(ctx, s, c, r); err != nil {
		return nil, nil, err
	}
	return hot, blk, nil
}

// resetCounter sets the counter key to 0 through an uncounted client.
func resetCounter(ctx context.Context, rc rueidis.Client, counter string) error {
	if err := rc.Do(ctx, rc.B().Set().Key(counter).Value("0").Build()).Error(); err != nil {
		return fmt.Errorf("reset counter: %w", err)
	}
	return nil
}

// readCounter returns the counter's value.
func readCounter(ctx context.Context, rc rueidis.Client, counter string) (int64, error) {
	v, err := rc.Do(ctx, rc.B().Get().Key(counter).Build()).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("read counter: %w", err)
	}
	return v, nil
}

// runHot runs the hot-lock phase for s.duration: s.goroutines goroutines on
// each client, all taking the same lock over and over, and reports what the
// lock cost.
func runHot(ctx context.Context, srv *redistest.Server, s settings, c contender, r *rig) (*result, error) {
	counter := s.prefix + ":counter:" + c.slug
	if err := resetCounter(ctx, r.raw[0], counter); err != nil {
		return nil, err
	}
	before, err := srv.CommandStats(ctx)
	if err != nil {
		return nil, err
	}
	reqsBefore := r.reqs.Snapshot()

	res := &result{name: c.name, clients: s.clients, perGo: make([]int64, s.clients*s.goroutines)}
	runCtx, stop := context.WithTimeoutCause(ctx, s.duration, errTimeUp)
	defer stop()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		waits = make([][]time.Duration, len(res.perGo))
		holds = make([][]span, len(res.perGo))
		cut   = make([]time.Duration, len(res.perGo))
		fail  error
	)
	start := time.Now()
	for g := range res.perGo {
		wg.Go(func() {
			rc, l := r.raw[g%s.clients], r.lockers[g%s.clients]
			w, h, pending, err := contend(runCtx, g, rc, l, counter, s.hold)
			res.perGo[g], waits[g], holds[g], cut[g] = int64(len(h)), w, h, pending
			if err != nil {
				mu.Lock()
				fail = errors.Join(fail, err)
				mu.Unlock()
				stop() // one broken goroutine spoils the run: end it early
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	reqsAfter := r.reqs.Snapshot()
	if fail != nil {
		return nil, fail
	}
	if err := ctx.Err(); err != nil {
		return nil, err // interrupted
	}

	after, err := srv.CommandStats(ctx)
	if err != nil {
		return nil, err
	}
	var all []span
	for g := range res.perGo {
		res.acquired += res.perGo[g]
		res.waits = append(res.waits, waits[g]...)
		res.longestCut = max(res.longestCut, cut[g])
		all = append(all, holds[g]...)
	}
	res.idle, res.retaken = handOffs(all)
	res.cmds = deltas(before, after, "info") // INFO is the snapshots' own cost
	for _, n := range res.cmds {
		res.allCmds += n
	}
	res.lockCmds = res.allCmds - 2*res.acquired // one GET and one SET of the counter each
	res.reqs = deltas(reqsBefore, reqsAfter, "")
	for _, n := range res.reqs {
		res.lockReqs += n
	}
	if res.counter, err = readCounter(ctx, r.raw[0], counter); err != nil {
		return nil, err
	}
	return res, nil
}

// errTimeUp ends a run's context when its duration is over.
var errTimeUp = errors.New("run time is up")

// span is one hold of the lock as its goroutine saw it: from the moment Lock
// returned to the end of the critical section, just before the release.
type span struct {
	g        int // the goroutine
	acquired time.Time
	released time.Time
}

// handOffs takes every hold of a run and returns the mean time the lock sat
// idle between one holder's release and the next holder's acquisition, and
// the fraction of acquisitions made by the goroutine that held the lock just
// before. The stamps come from one process's monotonic clock, and holds never
// overlap, so ordering them by acquisition orders them by release too.
func handOffs(holds []span) (idle time.Duration, retaken float64) {
	if len(holds) < 2 {
		return 0, 0
	}
	slices.SortFunc(holds, func(a, b span) int { return a.acquired.Compare(b.acquired) })
	var sum time.Duration
	same := 0
	for i := 1; i < len(holds); i++ {
		sum += holds[i].acquired.Sub(holds[i-1].released)
		if holds[i].g == holds[i-1].g {
			same++
		}
	}
	n := len(holds) - 1
	return sum / time.Duration(n), float64(same) / float64(n)
}

// contend is goroutine g of the hot phase: it takes the lock until ctx ends,
// and inside it increments the counter by reading and writing it back, which
// loses updates unless the lock really excludes everybody else. It returns how
// long each wait took, each hold, and how long the wait that the end of the
// run cut short had lasted. The counter goes through rc, which is not counted.
func contend(ctx context.Context, g int, rc rueidis.Client, l locker, counter string, hold time.Duration) (waits []time.Duration, holds []span, pending time.Duration, err error) {
	for ctx.Err() == nil {
		t0 := time.Now()
		unlock, err := l.Lock(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return waits, holds, time.Since(t0), nil // the run is over
			}
			return waits, holds, 0, err
		}
		acquired := time.Now()
		waits = append(waits, acquired.Sub(t0))
		// The critical section runs to the end even when the run is over, so
		// that each counted acquisition has exactly one increment.
		err = increment(context.WithoutCancel(ctx), rc, counter)
		time.Sleep(hold)
		holds = append(holds, span{g: g, acquired: acquired, released: time.Now()})
		if uerr := unlock(); err == nil {
			err = uerr
		}
		if err != nil {
			return waits, holds, 0, err
		}
	}
	return waits, holds, 0, nil
}

// increment is a deliberately non-atomic counter++: GET, then SET.
func increment(ctx context.Context, rc rueidis.Client, counter string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := rc.Do(ctx, rc.B().Get().Key(counter).Build()).AsInt64()
	if err != nil {
		return fmt.Errorf("counter GET: %w", err)
	}
	err = rc.Do(ctx, rc.B().Set().Key(counter).Value(strconv.FormatInt(v+1, 10)).Build()).Error()
	if err != nil {
		return fmt.Errorf("counter SET: %w", err)
	}
	return nil
}

// deltas is how much each count grew between two snapshots, leaving out
// skip. Commands that Lua scripts run count one each in INFO commandstats, as
// does the script call; in the requests a client sent, only the call counts.
func deltas(before, after map[string]int64, skip string) map[string]int64 {
	d := map[string]int64{}
	for cmd, calls := range after {
		if n := calls - before[cmd]; n > 0 && cmd != skip {
			d[cmd] = n
		}
	}
	return d
}
