package rlock

import (
	"context"
	"time"

	"github.com/relockio/relock/internal/core"
)

// Observer is told of the lock events of a Client (see WithObserver): every
// acquisition call of a Mutex, RWMutex or semaphore.Semaphore (Lock, TryLock,
// RLock, TryRLock, Acquire, TryAcquire) when it returns, every release call
// (Unlock, RUnlock, Release) when it returns, and every hold that ends,
// however it ends (released, lease lost, abandoned, or the Client closed).
// Package relockotel implements it with OpenTelemetry metrics and spans.
//
// The calls are synchronous, in the goroutine of the call (a hold end may
// come from the watchdog or a timer): an Observer must be quick, must not
// block, and must not call the Client. e is valid during the call only.
type Observer interface {
	Acquired(ctx context.Context, e *Event)
	Released(ctx context.Context, e *Event)
	HoldEnded(e *Event)
}

// Event is one event told to an Observer.
type Event struct {
	// Kind is what the lock is: "mutex", "rwmutex-read", "rwmutex-write"
	// or "semaphore".
	Kind string
	// Op is the method: "Lock", "TryLock", "RLock", "TryRLock", "Unlock",
	// "RUnlock", "Acquire", "TryAcquire", "Release"; empty for a hold end.
	Op string
	// Name is the lock's or semaphore's name, as the program chose it.
	Name string
	// Start is when the call (or, for a hold end, the hold) started;
	// Duration how long it took (the wait, for an acquisition; how long the
	// lock was held, for a hold end).
	Start    time.Time
	Duration time.Duration
	// Waited reports that the acquisition could not take the lock at once:
	// it waited (in Redis's queue or behind goroutines of its Client).
	Waited bool
	// Via is how a successful acquisition got the lock.
	Via Via
	// HandOff is, for Via ViaLocalPass, the time from the pass (the
	// Unlock of the goroutine before) to the new hold, and for ViaHandOff,
	// from the wake-up that ended the wait (the hand-off message, or a
	// re-check) to the new hold.
	HandOff time.Duration
	// Err is the call's error (for a hold end, its cause); Class sorts it.
	Err   error
	Class ErrorClass
	// Final reports that a release ended the hold (its last level).
	Final bool
	// Lost and Abandoned tell a hold end that was no release: the lease was
	// lost, or the hold was given up after a command of unknown outcome.
	Lost, Abandoned bool
}

// Via is how an acquisition got its lock.
type Via uint8

// Ways an acquisition gets its lock.
const (
	// ViaRedis: its own attempt in Redis took the lock, without waiting.
	ViaRedis Via = iota
	// ViaLocalPass: a goroutine of the same Client passed the lock on at
	// its Unlock, without a round trip.
	ViaLocalPass
	// ViaHandOff: the call waited and Redis granted it the lock: a release
	// of another Client handed it over, or a re-check found it free.
	ViaHandOff
	// ViaKept: the Client's last Unlock kept the lock for it (WithLinger).
	ViaKept
	// ViaReentry: the context held the lock already.
	ViaReentry
)

func (v Via) String() string {
	switch v {
	case ViaRedis:
		return "redis"
	case ViaLocalPass:
		return "local_pass"
	case ViaHandOff:
		return "hand_off"
	case ViaKept:
		return "kept"
	case ViaReentry:
		return "reentry"
	}
	return "unknown"
}

// ErrorClass sorts the errors of lock calls.
type ErrorClass uint8

// Error classes.
const (
	ClassNone        ErrorClass = iota // no error
	ClassLocked                        // ErrLocked, semaphore.ErrNoPermits
	ClassUnavailable                   // ErrUnavailable
	ClassPermission                    // ErrPermission
	ClassOther                         // anything else (a cancelled ctx, ErrNotHeld, ...)
)

func (c ErrorClass) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassLocked:
		return "locked"
	case ClassUnavailable:
		return "unavailable"
	case ClassPermission:
		return "permission"
	}
	return "other"
}

// WithObserver sets an Observer told of every lock event of the Client (see
// Observer). Default: none. Client.Stats counts the same events either way.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// observer adapts an Observer to the machinery's events.
type observer struct{ o Observer }

func (w observer) Acquired(ctx context.Context, e *core.Event) { w.o.Acquired(ctx, event(e)) }
func (w observer) Released(ctx context.Context, e *core.Event) { w.o.Released(ctx, event(e)) }
func (w observer) HoldEnded(e *core.Event)                     { w.o.HoldEnded(event(e)) }

func event(e *core.Event) *Event {
	return &Event{Kind: e.Kind, Op: e.Op, Name: e.Name, Start: e.Start, Duration: e.Duration,
		Waited: e.Call.Waited, Via: Via(e.Call.Via), HandOff: e.Call.HandOff,
		Err: e.Err, Class: ErrorClass(e.Class), Final: e.Final, Lost: e.Lost, Abandoned: e.Abandoned}
}

// Stats are the running figures of a Client's locks and semaphores, since
// New: what an Observer is told, counted. Durations are totals: divide by
// the matching count for a mean (see the Mean methods).
type Stats struct {
	// Acquisitions counts successful acquisition calls, re-entries
	// included; Waited the acquisition calls that waited (whatever their
	// outcome), for WaitTotal.
	Acquisitions, Waited int64
	// LocalPasses counts acquisitions passed the lock by a goroutine of the
	// Client; HandOffs those granted it by Redis after waiting.
	LocalPasses, HandOffs int64
	// Failures by class: ErrLocked (semaphore.ErrNoPermits),
	// ErrUnavailable, ErrPermission, and anything else (a cancelled
	// context, an invalid option, ...).
	Locked, Unavailable, Permission, OtherErrors int64
	// Holds ended: Released by an Unlock (or Release), LeaseLost (without
	// one), Abandoned (given up after a command of unknown outcome);
	// HoldsEnded counts these and the holds Close ended.
	Released, LeaseLost, Abandoned, HoldsEnded int64
	// Held is the number of holds live now; Waiting the acquisition calls
	// waiting now.
	Held, Waiting int64
	// WaitTotal is the time spent by the calls counted in Waited;
	// HoldTotal the time held by the holds counted in HoldsEnded;
	// LocalPassTotal and HandOffTotal the hand-off latencies (see
	// Event.HandOff) of LocalPasses and HandOffs.
	WaitTotal, HoldTotal, LocalPassTotal, HandOffTotal time.Duration
}

// MeanWait is the mean wait of the calls that waited.
func (s Stats) MeanWait() time.Duration { return mean(s.WaitTotal, s.Waited) }

// MeanHold is the mean time a hold lasted.
func (s Stats) MeanHold() time.Duration { return mean(s.HoldTotal, s.HoldsEnded) }

// MeanLocalPass is the mean latency of a local pass.
func (s Stats) MeanLocalPass() time.Duration { return mean(s.LocalPassTotal, s.LocalPasses) }

// MeanHandOff is the mean latency of a hand-off through Redis.
func (s Stats) MeanHandOff() time.Duration { return mean(s.HandOffTotal, s.HandOffs) }

func mean(total time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return total / time.Duration(n)
}

// Stats returns the Client's running figures: counts of acquisitions,
// hand-offs, failures and hold ends, the holds and waits live now, and
// duration totals. Counting costs atomic adds; Stats itself is cheap enough
// for metrics scraping.
func (c *Client) Stats() Stats {
	if c.c == nil {
		return Stats{}
	}
	s := &c.c.Stats
	return Stats{
		Acquisitions: s.Acquired.Load(), Waited: s.Waited.Load(),
		LocalPasses: s.HandOffsLocal.Load(), HandOffs: s.HandOffs.Load(),
		Locked: s.Failed[core.ClassLocked].Load(), Unavailable: s.Failed[core.ClassUnavailable].Load(),
		Permission: s.Failed[core.ClassPermission].Load(), OtherErrors: s.Failed[core.ClassOther].Load(),
		Released: s.Released.Load(), LeaseLost: s.Lost.Load(), Abandoned: s.Abandoned.Load(), HoldsEnded: s.HoldsEnded.Load(),
		Held: int64(c.c.HoldCount()), Waiting: s.Waiting.Load(),
		WaitTotal: time.Duration(s.WaitNanos.Load()), HoldTotal: time.Duration(s.HoldNanos.Load()),
		LocalPassTotal: time.Duration(s.HandOffLocalNanos.Load()), HandOffTotal: time.Duration(s.HandOffNanos.Load()),
	}
}
