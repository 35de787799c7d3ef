package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Class sorts the error of a failed acquisition for Stats and metrics.
type Class uint8

// Error classes; ClassNone is a success.
const (
	ClassNone Class = iota
	ClassLocked
	ClassUnavailable
	ClassPermission
	ClassOther
	numClasses
)

// Classify sorts err; locked is the primitive's "taken" error (rlock's
// ErrLocked, semaphore's ErrNoPermits).
func Classify(err, locked error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, locked):
		return ClassLocked
	case errors.Is(err, ErrPermission):
		return ClassPermission
	case errors.Is(err, ErrUnavailable):
		return ClassUnavailable
	}
	return ClassOther
}

// Via is how an acquisition got its lock or permits.
type Via uint8

// Ways to acquire.
const (
	// ViaRedis: the call's own script in Redis granted it, without waiting.
	ViaRedis Via = iota
	// ViaLocal: a goroutine of this Client passed it on without Redis.
	ViaLocal
	// ViaHandOff: the call waited and Redis granted it (a hand-off message
	// from another Client's release, or a re-check that found it free).
	ViaHandOff
	// ViaKept: this Client's last release kept it (a linger, see WithLinger).
	ViaKept
	// ViaReentry: the context held it already.
	ViaReentry
)

// Call is what one acquisition call learned, filled in as it goes.
type Call struct {
	Start   time.Time
	Waited  bool
	Via     Via
	HandOff time.Duration // local pass: since the pass; hand-off: since the wake
}

// CopyTo copies what the call learned to to, keeping to's Start.
func (c *Call) CopyTo(to *Call) {
	to.Waited, to.Via, to.HandOff = c.Waited, c.Via, c.HandOff
}

// Event is one event told to an Observer (see the rlock.Observer wrapper).
type Event struct {
	Kind     string // the hold kind's name: mutex, rwmutex-read, rwmutex-write, semaphore
	Op       string // the method: Lock, TryLock, Unlock, Acquire, ...
	Name     string
	Start    time.Time
	Duration time.Duration // of the call; for a hold's end, how long it was held
	Call     Call          // acquisitions only
	Err      error
	Class    Class
	Final    bool // a release that ended the hold
	// Hold ends only: Lost (the lease was lost) or Abandoned (given up
	// after a command of unknown outcome).
	Lost, Abandoned bool
}

// Observer is told of acquisitions, releases and hold ends. Calls are made
// synchronously from the lock's methods: they must be quick.
type Observer interface {
	Acquired(ctx context.Context, e *Event)
	Released(ctx context.Context, e *Event)
	HoldEnded(e *Event)
}

// Counters are the Client's running figures (rlock.Client.Stats): atomic
// adds only.
type Counters struct {
	Acquired                  atomic.Int64
	Waited                    atomic.Int64
	Failed                    [numClasses]atomic.Int64
	HandOffsLocal, HandOffs   atomic.Int64
	Released, Lost, Abandoned atomic.Int64
	Waiting                   atomic.Int64
	WaitNanos, HoldNanos      atomic.Int64
	HandOffLocalNanos         atomic.Int64
	HandOffNanos, HoldsEnded  atomic.Int64
}

// BeginWait counts a call that starts to wait (once per call).
func (c *Client) BeginWait(call *Call) {
	if !call.Waited {
		call.Waited = true
		c.Stats.Waiting.Add(1)
	}
}

// EndWait ends what BeginWait counted.
func (c *Client) EndWait(call *Call) {
	if call.Waited {
		c.Stats.Waiting.Add(-1)
	}
}

// Acquired records the end of an acquisition call (op on the lock name of
// kind) that started at call.Start.
func (c *Client) Acquired(ctx context.Context, kind *Kind, op, name string, call *Call, err, locked error) {
	var d time.Duration
	if call.Waited || c.Obs != nil {
		d = time.Since(call.Start)
	}
	s := &c.Stats
	class := Classify(err, locked)
	if err != nil {
		s.Failed[class].Add(1)
	} else {
		s.Acquired.Add(1)
		switch call.Via {
		case ViaLocal:
			s.HandOffsLocal.Add(1)
			s.HandOffLocalNanos.Add(int64(call.HandOff))
		case ViaHandOff:
			s.HandOffs.Add(1)
			s.HandOffNanos.Add(int64(call.HandOff))
		}
	}
	if call.Waited {
		s.Waited.Add(1)
		s.WaitNanos.Add(int64(d))
	}
	if c.Obs != nil {
		c.Obs.Acquired(observed(ctx), &Event{Kind: kind.Name, Op: op, Name: name, Start: call.Start, Duration: d, Call: *call, Err: err, Class: class})
	}
}

// Released records the end of a release call begun at start; final tells
// that it ended the hold.
func (c *Client) Released(ctx context.Context, kind *Kind, op, name string, start time.Time, final bool, err error) {
	if c.Obs != nil {
		c.Obs.Released(observed(ctx), &Event{Kind: kind.Name, Op: op, Name: name, Start: start, Duration: time.Since(start), Err: err, Class: Classify(err, nil), Final: final})
	}
}

// holdEnded records the end of h with cause.
func (c *Client) holdEnded(h *Hold, cause error) {
	held := time.Since(h.since)
	s := &c.Stats
	lost, abandoned := false, errors.Is(cause, ErrAbandoned)
	switch {
	case abandoned:
		s.Abandoned.Add(1)
	case errors.Is(cause, ErrClosed):
		// Close ended it: neither released nor lost.
	case errors.Is(cause, ErrLeaseLost):
		lost = true
		s.Lost.Add(1)
	default:
		s.Released.Add(1)
	}
	s.HoldsEnded.Add(1)
	s.HoldNanos.Add(int64(held))
	if c.Obs != nil && h.kind != nil {
		c.Obs.HoldEnded(&Event{Kind: h.kind.Name, Name: h.name, Start: h.since, Duration: held, Err: cause, Lost: lost, Abandoned: abandoned})
	}
}

// observed is the context an Observer is given for a call made with ctx: a
// call refused for its nil context is still told, with an empty one.
func observed(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
