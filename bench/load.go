package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
)

// Job is one run of one contender in one worker process.
type Job struct {
	// Mode is "" for a lock load, or "subscribe" for the subscriber of the
	// pub/sub floor probe (see floor.go), which uses Addr, Channel and
	// Messages only.
	Mode       string        `json:"mode,omitempty"`
	Channel    string        `json:"channel,omitempty"`
	Messages   int           `json:"messages,omitempty"`
	Contender  string        `json:"contender"`
	Addr       string        `json:"addr"`
	Cluster    []string      `json:"cluster,omitempty"` // the masters, when the point runs on a Redis Cluster
	Prefix     string        `json:"prefix"`
	Worker     int           `json:"worker"`
	Clients    int           `json:"clients"`    // lock clients opened by this worker
	Goroutines int           `json:"goroutines"` // goroutines in this worker
	FirstG     int           `json:"first_g"`    // global number of its first goroutine
	Locks      int           `json:"locks"`      // goroutine g uses lock g % Locks
	Hold       time.Duration `json:"hold"`       // critical section, besides the counter update
	HoldMax    time.Duration `json:"hold_max"`   // > Hold: each critical section drawn uniformly from [Hold, HoldMax)
	HoldSeed   uint64        `json:"hold_seed"`  // with HoldMax: the draws' seed, the same for every contender of a round (see holdFor)
	Once       bool          `json:"once"`       // each goroutine makes one Lock call (the blocked point)
	FreshNames bool          `json:"fresh"`      // every acquisition a new lock name (entity-new; Locks = Goroutines)
	Counters   string        `json:"counters"`   // the shared counter file (see shared.go)
	Duration   time.Duration `json:"duration"`   // no Lock call starts after it
	Wait       time.Duration `json:"wait"`       // bound of every Lock call
	StuckAfter time.Duration `json:"stuck_after"`
	DrainLimit time.Duration `json:"drain_limit"`
}

// Record is one acquisition: goroutine, lock, Lock called, Lock returned,
// Unlock called, Unlock returned (CLOCK_MONOTONIC ns), and 1 if the counter
// was incremented inside.
type Record [7]int64

const (
	recG = iota
	recLock
	recStart
	recAcq
	recRel
	recEnd
	recInc
)

// Unfinished is a Lock call that did not succeed.
type Unfinished struct {
	G      int    `json:"g"`
	Lock   int    `json:"lock"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Reason string `json:"reason"` // stuck, drain-limit, wait-timeout, error
}

// WorkerResult is what one worker measured in one run.
type WorkerResult struct {
	Worker     int              `json:"worker"`
	Start      int64            `json:"start"`
	Deadline   int64            `json:"deadline"`
	End        int64            `json:"end"`
	Records    []Record         `json:"records"`
	Unfinished []Unfinished     `json:"unfinished"`
	Requests   map[string]int64 `json:"requests"`
	// Messages is how many pub/sub messages the worker's lock clients
	// received during the run, when they can tell (MessagesCounted).
	Messages        int64 `json:"messages"`
	MessagesCounted bool  `json:"messages_counted"`
	// Receipts are the pub/sub floor probe's messages as received: the
	// message's sequence number and the CLOCK_MONOTONIC ns of receipt.
	Receipts    [][2]int64       `json:"receipts,omitempty"`
	Probes      map[string]int64 `json:"probes"` // the monitor's commands, to leave out of the server's counts
	Errors      int              `json:"errors"`
	ErrorSample string           `json:"error_sample,omitempty"`
}

// Causes with which the monitor ends a wait.
var (
	errStuck      = errors.New("stuck: the lock stayed free while this goroutine waited")
	errDrainLimit = errors.New("still waiting at the drain limit")
)

// maxErrors stops a goroutine that keeps failing (Redis gone, say) from
// spinning.
const maxErrors = 1000

// load is one job being run.
type load struct {
	job     Job
	c       Contender
	reqs    *measure.Requests
	clients []LockClient
	raw     rueidis.Client // probes; not counted
	ctrs    *sharedCounters

	// Monitor state, per goroutine and per lock.
	waiting  []atomic.Int32 // 1 while in Lock, 2 once the monitor ended the wait
	cancels  []context.CancelCauseFunc
	progress []atomic.Int64 // the last acquisition of each lock, mono ns
	// nth is, with FreshNames, the number of each goroutine's current lock
	// name, so that the monitor probes the one name it waits for.
	nth []atomic.Int64

	probes map[string]int64 // commands the monitor sent, by lower-case name

	mu     sync.Mutex
	res    WorkerResult
	errors atomic.Int64
}

func openLoad(ctx context.Context, job Job) (*load, error) {
	c, ok := contenderBySlug(job.Contender)
	if !ok {
		return nil, fmt.Errorf("unknown contender %q", job.Contender)
	}
	l := &load{job: job, c: c, reqs: new(measure.Requests), probes: map[string]int64{}}
	var err error
	if l.ctrs, err = mapCounterFile(job.Counters, job.Locks); err != nil {
		return nil, err
	}
	l.raw, err = newRawClient(job.Addr, job.Cluster)
	if err != nil {
		l.ctrs.close()
		return nil, err
	}
	for range job.Clients {
		lc, err := c.Open(ctx, OpenEnv{Addr: job.Addr, Cluster: job.Cluster, Prefix: job.Prefix, Requests: l.reqs})
		if err != nil {
			l.close()
			return nil, fmt.Errorf("%s: open: %w", c.Slug, err)
		}
		l.clients = append(l.clients, lc)
	}
	return l, nil
}

func (l *load) close() {
	for _, c := range l.clients {
		_ = c.Close()
	}
	if l.raw != nil {
		l.raw.Close()
	}
	l.ctrs.close()
}

func lockName(i int) string { return "L" + strconv.Itoa(i) }

// freshName is the nth name of goroutine slot lock at an entity-new point.
func freshName(lock int, nth int64) string {
	return "E" + strconv.Itoa(lock) + "." + strconv.FormatInt(nth, 10)
}

// nameOf is the lock name goroutine i uses now: with FreshNames its
// current fresh name, otherwise its lock's fixed name.
func (l *load) nameOf(i int) string {
	lock := (l.job.FirstG + i) % l.job.Locks
	if l.job.FreshNames {
		return freshName(lock, l.nth[i].Load())
	}
	return lockName(lock)
}

// messages sums the pub/sub messages the clients received so far; ok is
// false unless every client can tell.
func (l *load) messages() (n int64, ok bool) {
	for _, c := range l.clients {
		mc, isCounter := c.(messageCounter)
		if !isCounter {
			return 0, false
		}
		m, counted := mc.MessagesReceived()
		if !counted {
			return 0, false
		}
		n += m
	}
	return n, len(l.clients) > 0
}

// run starts the goroutines, stops starting Lock calls after the job's
// duration, and returns once every goroutine is done: the waits still open at
// the deadline drain, and the monitor ends those that are stuck.
func (l *load) run() WorkerResult {
	j := l.job
	l.waiting = make([]atomic.Int32, j.Goroutines)
	l.cancels = make([]context.CancelCauseFunc, j.Goroutines)
	l.progress = make([]atomic.Int64, j.Locks)
	l.nth = make([]atomic.Int64, j.Goroutines)
	ctxs := make([]context.Context, j.Goroutines)
	for i := range ctxs {
		ctxs[i], l.cancels[i] = context.WithCancelCause(context.Background())
	}
	msgs0, counted := l.messages()
	l.res = WorkerResult{Worker: j.Worker, Start: mono()}
	l.res.Deadline = l.res.Start + int64(j.Duration)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range j.Goroutines {
		wg.Go(func() { l.goroutine(ctxs[i], i) })
	}
	go func() { wg.Wait(); close(done) }()
	l.monitor(done)
	for _, cancel := range l.cancels {
		cancel(nil)
	}
	l.res.End = mono()
	if msgs1, ok := l.messages(); ok && counted {
		l.res.Messages, l.res.MessagesCounted = msgs1-msgs0, true
	}
	l.res.Requests = l.reqs.Snapshot()
	l.res.Probes = l.probes
	l.res.Errors = int(l.errors.Load())
	return l.res
}

func (l *load) goroutine(ctx context.Context, i int) {
	j := l.job
	g := j.FirstG + i
	lock := g % j.Locks
	client := l.clients[i%len(l.clients)]
	var recs []Record
	var unfinished []Unfinished
	defer func() {
		l.mu.Lock()
		l.res.Records = append(l.res.Records, recs...)
		l.res.Unfinished = append(l.res.Unfinished, unfinished...)
		l.mu.Unlock()
	}()
	for first := true; (first || !j.Once) && mono() < l.res.Deadline && ctx.Err() == nil; first = false {
		if j.FreshNames {
			l.nth[i].Add(1) // before waiting is set: the monitor reads it after
		}
		name := l.nameOf(i)
		start := mono()
		l.waiting[i].Store(1)
		waitCtx, cancel := context.WithTimeout(ctx, j.Wait)
		held, err := client.Lock(waitCtx, name)
		acq := mono()
		ended := !l.waiting[i].CompareAndSwap(1, 0)
		if err != nil || ended {
			reason := "error"
			switch {
			case ended || ctx.Err() != nil:
				reason = "drain-limit"
				if errors.Is(context.Cause(ctx), errStuck) {
					reason = "stuck"
				}
			case waitCtx.Err() != nil:
				reason = "wait-timeout"
			default:
				l.noteError(fmt.Errorf("lock: %w", err))
			}
			if err == nil { // acquired just as the monitor gave up on it
				l.unlock(held)
			}
			cancel()
			unfinished = append(unfinished, Unfinished{G: g, Lock: lock, Start: start, End: acq, Reason: reason})
			if reason == "error" && l.errors.Load() < maxErrors {
				continue
			}
			return
		}
		l.progress[lock].Store(acq)
		nth := l.ctrs.increment(lock)
		if hold := holdFor(j, lock, nth); hold > 0 {
			time.Sleep(hold) // the critical section: this is the workload
		}
		rel := mono()
		l.unlock(held)
		end := mono()
		cancel()
		recs = append(recs, Record{int64(g), int64(lock), start, acq, rel, end, 1})
	}
}

func (l *load) unlock(h Held) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Unlock(ctx); err != nil {
		l.noteError(fmt.Errorf("unlock: %w", err))
	}
}

func (l *load) noteError(err error) {
	if l.errors.Add(1) == 1 {
		l.mu.Lock()
		l.res.ErrorSample = err.Error()
		l.mu.Unlock()
	}
}

// monitorTick is how often the monitor looks at the waits left after the
// deadline.
const monitorTick = 50 * time.Millisecond

// monitor returns when every goroutine is done. After the deadline it probes
// each lock that goroutines of this worker still wait for, reading the lock's
// keys and its counter (which every acquisition, in any worker, increments): a
// lock seen free at every probe for StuckAfter while its counter did not move
// has stuck waiters, whose waits the monitor ends. At the drain limit it ends
// every wait left.
func (l *load) monitor(done <-chan struct{}) {
	if wait := time.Duration(l.res.Deadline - mono()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
	}
	ticker := time.NewTicker(monitorTick)
	defer ticker.Stop()
	type watch struct {
		freeSince int64 // first probe of the current free, idle stretch
		counter   int64
		name      string // the name probed (entity-new: one per acquisition)
	}
	watches := map[int]*watch{}
	limit := l.res.Deadline + int64(l.job.DrainLimit)
	for {
		select {
		case <-done:
			return
		case <-ticker.C:
		}
		now := mono()
		// Only the goroutines still in Lock are probed: one name each,
		// however many names the run went through.
		blocked := map[int][]int{} // lock -> goroutines
		names := map[int]string{}  // lock -> the name they wait for
		for i := range l.waiting {
			if l.waiting[i].Load() == 1 {
				lock := (l.job.FirstG + i) % l.job.Locks
				blocked[lock] = append(blocked[lock], i)
				names[lock] = l.nameOf(i)
			}
		}
		if now > limit {
			for _, gs := range blocked {
				l.end(gs, errDrainLimit)
			}
			continue
		}
		states := l.probe(names)
		for lock, gs := range blocked {
			st, w := states[lock], watches[lock]
			switch {
			case !st.ok:
			case w == nil || w.name != names[lock] || !st.free || st.counter != w.counter:
				// First look, held, or taken and given back since the last look.
				watches[lock] = &watch{counter: st.counter, name: names[lock]}
				if st.free {
					watches[lock].freeSince = now
				}
			case w.freeSince == 0:
				w.freeSince = now
			case time.Duration(now-w.freeSince) >= l.job.StuckAfter:
				l.end(gs, errStuck)
			}
		}
	}
}

// end ends the waits of goroutines gs with cause.
func (l *load) end(gs []int, cause error) {
	for _, i := range gs {
		if l.waiting[i].CompareAndSwap(1, 2) {
			l.cancels[i](cause)
		}
	}
}

// lockState is what a probe saw of one lock.
type lockState struct {
	ok      bool // the probe worked
	free    bool
	counter int64
}

// probe reads the keys (of the name given) and the counter of each lock. Its
// commands are counted, so that they can be left out of the server-side
// command counts.
func (l *load) probe(locks map[int]string) map[int]lockState {
	type item struct {
		lock   int
		n      int
		quorum int
	}
	var items []item
	var cmds rueidis.Commands
	for lock, name := range locks {
		keys, quorum := l.c.Keys(l.job.Prefix, name)
		items = append(items, item{lock: lock, n: len(keys), quorum: quorum})
		for _, k := range keys {
			cmds = append(cmds, l.raw.B().Exists().Key(k).Build())
			l.probes["exists"]++
		}
	}
	states := map[int]lockState{}
	if len(cmds) == 0 {
		return states
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resps := l.raw.DoMulti(ctx, cmds...)
	k := 0
	for _, it := range items {
		st := lockState{ok: true}
		exist := 0
		for range it.n {
			n, err := resps[k].AsInt64()
			k++
			if err != nil {
				st.ok = false
			}
			exist += int(n)
		}
		st.free = exist < it.quorum
		st.counter = l.ctrs.load(it.lock)
		states[it.lock] = st
	}
	return states
}

// holdFor is the critical section of the nth acquisition of a lock. Drawn
// holds (HoldMax > Hold) come from the round's seed, the lock and n, so that
// the nth acquisition holds the lock equally long for every contender of a
// round: throughput then compares the locks, not the luck of the draws (with
// independent draws, about 95 holds of 10-20ms vary by ~2% from run to run).
func holdFor(j Job, lock int, nth int64) time.Duration {
	if j.HoldMax <= j.Hold {
		return j.Hold
	}
	r := rand.New(rand.NewPCG(j.HoldSeed^uint64(lock)<<32, uint64(nth)))
	return j.Hold + time.Duration(r.Int64N(int64(j.HoldMax-j.Hold)))
}
