package core

import (
	"container/heap"
	"sync"
	"time"
)

// A turn's linger is usually under a millisecond (a quarter of WithLinger's
// to all of it), and Go's timers cannot time that in an otherwise idle
// process: the runtime's poller sleeps in whole milliseconds on Linux, so a
// 100us or 500us time.AfterFunc fires after about 1.1ms (measured). Every
// linger that runs out would then keep the other Clients waiting a
// millisecond whatever the worker's pace. Short timers are therefore timed by
// one sleeper goroutine for the whole process, which sleeps in the kernel
// (nanosleep), at most fineStep at a time, while any is pending. A worker
// locking in a loop parks and unparks many times a millisecond: the sleeper
// then stays up, waking every fineStep, instead of being started or woken for
// each park; once nothing is pending it waits on a channel, and ends after
// fineIdleExit with none.
const (
	// fineLimit: timers of at least this long use the runtime's timers,
	// whose millisecond of lateness is then a small part of them.
	fineLimit = 2 * time.Millisecond
	// fineStep bounds each sleep, so a timer set while the sleeper sleeps
	// towards a later one is late by at most this (plus the kernel's slack).
	fineStep = 200 * time.Microsecond
	// fineIdleExit is how long the sleeper waits for a timer before ending.
	fineIdleExit = 100 * time.Millisecond
)

// Timer is a pending call set by AfterFunc.
type Timer interface {
	// Stop prevents the call, as time.Timer's Stop does: it reports
	// whether it did (false: the call has started or Stop ran before).
	Stop() bool
}

// AfterFunc calls f in its own goroutine once d has passed, like
// time.AfterFunc, but a d under fineLimit is kept to within about a tenth
// of a millisecond (see fineClock) instead of a millisecond.
func AfterFunc(d time.Duration, f func()) Timer {
	if d <= 0 || d >= fineLimit {
		return time.AfterFunc(d, f)
	}
	t := &fineTimer{at: time.Now().Add(d), f: f}
	clock.add(t)
	return t
}

// fineClock holds the pending short timers of the process, earliest first.
type fineClock struct {
	mu      sync.Mutex
	pending fineHeap
	sleeper sleeperState
	wake    chan struct{} // an idle sleeper's signal (buffered: one)
}

type sleeperState int

const (
	sleeperGone     sleeperState = iota // no sleeper goroutine
	sleeperSleeping                     // it will look at pending within fineStep
	sleeperIdle                         // it waits on wake
)

var clock = fineClock{wake: make(chan struct{}, 1)}

type fineTimer struct {
	at    time.Time
	f     func()
	index int // in fineClock.pending; -1 once fired or stopped
}

func (t *fineTimer) Stop() bool {
	clock.mu.Lock()
	defer clock.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&clock.pending, t.index)
	return true
}

func (c *fineClock) add(t *fineTimer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	heap.Push(&c.pending, t)
	switch c.sleeper {
	case sleeperGone:
		c.sleeper = sleeperSleeping
		go c.sleep()
	case sleeperIdle:
		c.sleeper = sleeperSleeping
		c.wake <- struct{}{} // cannot block: only an idle sleeper is signalled, once
	}
}

// sleep is the sleeper: it fires the timers that are due and sleeps towards
// the next; with none pending it waits for one, for up to fineIdleExit.
func (c *fineClock) sleep() {
	idle := time.NewTimer(fineIdleExit)
	defer idle.Stop()
	for {
		c.mu.Lock()
		now := time.Now()
		for len(c.pending) > 0 && !c.pending[0].at.After(now) {
			t := heap.Pop(&c.pending).(*fineTimer)
			go t.f()
		}
		if len(c.pending) > 0 {
			wait := min(c.pending[0].at.Sub(now), fineStep)
			c.mu.Unlock()
			sleepFine(wait)
			continue
		}
		c.sleeper = sleeperIdle
		c.mu.Unlock()
		idle.Reset(fineIdleExit)
		select {
		case <-c.wake:
			continue
		case <-idle.C:
		}
		c.mu.Lock()
		if c.sleeper == sleeperIdle {
			c.sleeper = sleeperGone
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		<-c.wake // an add came as the wait ended: take its signal
	}
}

// fineHeap is a container/heap of timers by due time.
type fineHeap []*fineTimer

func (h fineHeap) Len() int           { return len(h) }
func (h fineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h fineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *fineHeap) Push(x any) {
	t := x.(*fineTimer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *fineHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
