package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/mux"
)

// try makes one attempt. With w (a wait) it queues in Redis while the lock
// is taken, and tags w, so that a release can hand the lock to this owner by
// name; a grant or a pass that came in since the last attempt is taken
// without asking Redis.
func (a *Acquisition) try(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	if a.Owner == "" {
		a.NewOwner() // not before: a lock kept or passed within the Client needs none
	}
	if w != nil {
		if done, ok, retry := a.woken(w); done {
			return ok, retry, nil
		}
	}
	a.recheckBy = time.Time{}
	t := a.C.NewTicket()
	fresh := !a.sent
	a.sent = true
	r, err := a.Proto.Attempt(ctx, a, w != nil, fresh)
	if err != nil {
		return false, 0, a.attemptFailed(ctx, r, err)
	}
	a.lastErr = nil
	switch r.Status {
	case Acquired:
		if a.C.Unacked(r.Acked) {
			return a.unacked(ctx, w, r.Acked)
		}
		a.Reply, a.Ticket = r, t
		if w != nil && a.Local != nil {
			a.Local.Listen(a, w)
		}
		return true, 0, nil
	case Taken:
		a.Contended = true
		a.reached(true)
		retry := r.Retry
		if w != nil {
			a.inRedis, a.queuedAt = true, t
			a.place.Store(r.Place)
			// Re-check at least as often as the queue needs to keep our
			// place (behind a renewed hold the holder's lease bounds it
			// sooner).
			retry = min(retry, a.Spec.RecheckCap)
			a.recheckBy = time.Now().Add(retry)
		}
		return false, retry, nil
	}
	a.NewOwner() // OwnerGone: a previous call gave it up; never reuse it
	return false, 0, nil
}

// woken handles a wake-up of a queued waiter before any script runs: a pass
// from this Client, a grant proven for its place, a release that queued it
// (Promote), or a notice that the waiter ahead was just granted the lock.
// done reports that the attempt ends here, with ok and retry.
func (a *Acquisition) woken(w *mux.Waiter) (done, ok bool, retry time.Duration) {
	if a.Local != nil && a.Local.TakePass(a, w) {
		a.Passed = true
		return true, true, 0
	}
	a.wokeAt = time.Now()
	if a.keep == nil {
		a.keep = a.keepRule()
	}
	tag := a.Spec.Tag
	if tag == "" {
		tag = a.Owner
	}
	// A new tag (owner id) discards the grants to the old one.
	w.SetTagKeeping(tag, a.keep)
	data := w.TakeData()
	if a.handedOff(data) {
		if a.Local != nil {
			a.Local.Listen(a, w)
		}
		return true, true, 0
	}
	a.inRedis = true
	if a.presumed {
		a.presumed = false
		a.recheckBy = time.Now().Add(a.presumeIn)
		if data == "" {
			// Nothing yet: re-check when the release's reply said.
			return true, false, a.presumeIn
		}
		// A message came: a notice (below, which never postpones that
		// re-check), or a grant that handedOff could not take (it came
		// late, or the release granted the place itself, whose reply
		// named no earlier fence): a round trip confirms it now, rather
		// than a sleep past a grant Redis made.
	}
	if data == "" && !a.recheckBy.IsZero() {
		// A wake whose message an earlier try took already (it came before
		// that try, which did not wait for it: a place queued by a release
		// hears the release's notices before it is handed over): nothing
		// new, so the re-check planned stands. (A wake that asks for a
		// re-check carries mux.WakeData.)
		if retry := time.Until(a.recheckBy); retry > 0 {
			return true, false, retry
		}
	}
	if d, ok := ParseNotice(data, a.Spec.MaxClaim); ok && !a.recheckBy.IsZero() {
		// The waiter ahead was just handed the lock: re-check when its
		// claim lapses (a drift margin later), in case it never takes the
		// lock up; its grant to us, if it does, wakes us before. A notice
		// never postpones the re-check planned.
		if retry := min(d+DriftMargin(d), time.Until(a.recheckBy)); retry > 0 {
			a.recheckBy = time.Now().Add(retry)
			return true, false, retry
		}
	}
	return false, false, 0
}

// reached tells the Client's calls that wait behind this one whether its
// attempt reached Redis (see LocalTurns.Reached).
func (a *Acquisition) reached(ok bool) {
	if a.Local != nil {
		a.Local.Reached(a, ok)
	}
}

// attemptFailed records what a failed attempt says of Redis.
func (a *Acquisition) attemptFailed(ctx context.Context, r Reply, err error) error {
	a.C.NoteError(err)
	if r.Status == Answered {
		a.lastErr = nil
		return answeredError{err}
	}
	// Unless it says nothing of Redis (the wait ending mid-call, another
	// caller's deadline closing the connection): then what the attempts
	// before it learned stands.
	if !SaysNothing(ctx, err) {
		a.lastErr, a.Contended = err, false
		a.reached(isRedisAnswer(err))
	}
	if !isRedisAnswer(err) || r.Status == Acquired {
		// The script may have run, or may still run (Acquired with an
		// error: it took the lock, WAIT failed): Owner may hold the lock
		// or a place. Keep it, so that the next attempt finds either; only
		// a round trip may confirm a grant from now on.
		a.Uncertain = true
		a.queuedAt = Ticket{}
		a.place.Store(0)
	}
	return err
}

// waitTry is try for a wait: an attempt that finds the lock taken makes the
// call a waiter (see Client.BeginWait).
func (a *Acquisition) waitTry(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	ok, retry, err := a.try(ctx, w)
	if !ok && err == nil {
		a.C.BeginWait(&a.Call)
	}
	return ok, retry, err
}

// handedOff reports whether a release handed the lock to this owner: a
// message proven with its secret, for the place its last attempt was told,
// woke it. The grant runs for the claim window (or the lease, when shorter)
// from a moment after queuedAt, which then dates the hold; when that leaves
// less than half the window, the caller confirms with a round trip instead
// (the acquire script finds the hold and sets its whole lease), so a hold
// never starts nearly expired. A call with a fixed lease confirms a grant
// shorter than its lease the same way (the watchdog, which extends claims,
// does not renew it), and so does every grant with WithReplicaAck (a round
// trip followed by WAIT covers it). A grant to an earlier place (read late,
// or replayed after a lapse or a re-queue) names another place and proves
// nothing.
func (a *Acquisition) handedOff(data string) bool {
	claim := a.Claim()
	if data == "" || a.queuedAt.At().IsZero() || time.Since(a.queuedAt.At()) > claim/2 ||
		(claim < a.Lease && !a.Renew) || a.C.Acking() {
		return false
	}
	r, _, ok := a.Proto.Parse(data, a.Secret, a.place.Load())
	if !ok {
		return false
	}
	a.Reply, a.Ticket, a.Claimed = r, a.queuedAt, claim < a.Lease
	return true
}

// keepRule is the rule by which the waiter keeps a message to this owner
// until try takes it (see KeepData): a later message, which anyone may
// publish, never displaces a grant proven for this owner's place, nor does a
// notice displace a wake that re-checks sooner.
func (a *Acquisition) keepRule() func(held, next string) bool {
	p, secret, place := a.Proto, a.Secret, &a.place
	return KeepData(func(data string) (uint64, bool) {
		_, order, ok := p.Parse(data, secret, place.Load())
		return order, ok
	}, a.Spec.MaxClaim)
}

// Claim is how long a hand-off to this owner grants the lock for.
func (a *Acquisition) Claim() time.Duration { return min(a.Lease, a.C.Cfg.ClaimWindow) }

// unacked gives back an acquisition that too few replicas acknowledged
// (WithReplicaAck) before the call goes on: at once, so that a failing call
// leaves nothing held in Redis, and under a tombstone, as the owner id is
// not used again. With WithReplicaAckRetry a waiting call tries again soon,
// under a new owner id; otherwise the attempt fails with ErrNotReplicated.
func (a *Acquisition) unacked(ctx context.Context, w *mux.Waiter, acked int64) (bool, time.Duration, error) {
	c := a.C
	err := a.wrap(c.NotReplicated(ctx, acked))
	owner, secret := a.Owner, a.Secret
	if uerr := c.GiveBack(ctx, func(ctx context.Context) error { return a.Proto.AbandonNow(ctx, owner, secret) },
		func() { a.Proto.GiveUp(c.BackgroundContext(), owner, secret, true) }); uerr != nil {
		err = fmt.Errorf("%w (giving it back failed, it is free at the latest in %v: %w)", err, a.Lease, uerr)
	}
	a.NewOwner()
	a.Uncertain, a.Contended = false, false
	if c.Cfg.ReplicaAckRetry && w != nil {
		// The wait goes on; if it runs out, the replicas are why.
		a.lastErr = a.wrap(c.NotReplicated(context.WithoutCancel(ctx), acked))
		return false, AckRetryIn, nil
	}
	if ctx.Err() == nil {
		a.lastErr = err // not when ctx ended the WAIT: Redis was reached
	}
	return false, 0, err
}

// answeredError is the kind's error for an answer of Redis (see Answered).
type answeredError struct{ err error }

func (e answeredError) Error() string { return e.err.Error() }
func (e answeredError) Unwrap() error { return e.err }

// WaitTimeoutError is the cause of a wait that ran out of its wait timeout;
// failure tells what it means.
type WaitTimeoutError struct{ D time.Duration }

func (e *WaitTimeoutError) Error() string { return "wait timeout of " + e.D.String() + " ran out" }

func (e *WaitTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// failure is the error of a call that ends without the lock. Where the wait
// ran out it tells why, from what the last attempt learned: Spec.Busy (the
// lock is taken) only when Redis said another owner holds the lock;
// ErrUnavailable, wrapping the last error, when Redis could not be reached
// or refused.
func (a *Acquisition) failure(err error) error {
	s := &a.Spec
	var timeout *WaitTimeoutError
	timedOut := errors.As(err, &timeout)
	waitOver := timedOut || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	var answered answeredError
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.As(err, &answered):
		return answered.err // the kind's own error, naming the call
	case !waitOver && Transient(err):
		// One attempt (a Try call), and Redis could not be reached.
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, s.Op, s.Name, err)
	case !waitOver:
		return a.wrap(err)
	case isNotReplicated(a.lastErr):
		// Redis answered; the replicas did not acknowledge in time.
		return fmt.Errorf("%s: %s %q: %w; last attempt: %w", s.Pkg, s.Op, s.Name, err, Inner(a.lastErr))
	case a.lastErr != nil && errors.Is(err, a.lastErr):
		// The wait's error names it already (see WaitWith).
		return Refused(fmt.Errorf("%w: %s %q: %w", ErrUnavailable, s.Op, s.Name, err))
	case a.lastErr != nil:
		return Refused(fmt.Errorf("%w: %s %q: %w; last error: %w", ErrUnavailable, s.Op, s.Name, err, a.lastErr))
	case timedOut && a.Contended:
		return fmt.Errorf("%w: %q after waiting %v: %w", s.Busy, s.Name, timeout.D, context.DeadlineExceeded)
	case timedOut:
		return fmt.Errorf("%w: %s %q: no answer from Redis: %w", ErrUnavailable, s.Op, s.Name, err)
	case a.Contended && errors.Is(err, context.DeadlineExceeded):
		// ctx's own deadline ended a wait behind another owner.
		return fmt.Errorf("%w: %q: %w", s.Busy, s.Name, Inner(err))
	}
	return a.wrap(err)
}

// wrap names the call in err, unless err names it already.
func (a *Acquisition) wrap(err error) error {
	s := &a.Spec
	if errors.Is(err, ErrClosed) || errors.Is(err, s.Busy) || hasPrefix(err, s.Pkg+": "+s.Op+" ") {
		return Refused(err)
	}
	return Refused(fmt.Errorf("%s: %s %q: %w", s.Pkg, s.Op, s.Name, Inner(err)))
}

func hasPrefix(err error, p string) bool {
	msg := err.Error()
	return len(msg) >= len(p) && msg[:len(p)] == p
}

func isNotReplicated(err error) bool { return err != nil && errors.Is(err, ErrNotReplicated) }
