package rlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// errWriteHoldGone is what a read lock under a write hold learns when the
// write hold is gone in Redis.
var errWriteHoldGone = errors.New("the write hold it was taken under is gone")

// lock takes the read or the write lock (write); wait makes it block.
func (rw *RWMutex) lock(ctx context.Context, write, wait bool, opts []LockOption, call *core.Call) (context.Context, error) {
	lc, wait, err := lockCall(ctx, wait, opts, rw.usable())
	if err != nil {
		return nil, err
	}
	if !rw.c.Enter() {
		return nil, ErrClosed
	}
	defer rw.c.Exit()
	wl, rl := rw.links(ctx)
	a := &rwAcquisition{rw: rw, write: write, owner: rw.c.NewID(), secret: newSecret(), lease: rw.c.Cfg.WatchdogTimeout, renew: true}
	defer a.call.CopyTo(call) // see Mutex.lock
	if lc.leaseSet {
		a.lease, a.renew = lc.lease, false
	}
	if write {
		switch {
		case wl != nil && (!ended(wl.h) || rl == nil || ended(rl.h)):
			call.Via = core.ViaReentry
			return rw.reenter(ctx, wl.h, true, lc)
		case rl != nil && !ended(rl.h):
			return nil, fmt.Errorf("%w: the context holds the read lock %q; RUnlock it first", ErrUpgrade, rw.name)
		}
	} else {
		switch {
		case rl != nil:
			call.Via = core.ViaReentry
			return rw.reenter(ctx, rl.h, false, lc)
		case wl != nil && !ended(wl.h):
			// A downgrade in the making: granted at once, never queued.
			// (With WithReplicaAckRetry, a blocking RLock waits for the
			// replicas while ctx lasts instead.)
			a.via = wl.h.Owner
			a.persist = wait && rw.c.Cfg.ReplicaAckRetry
			wait = false
		}
	}

	tryCtx := ctx
	if a.persist && lc.waitSet {
		// A downgrade that waits for the replicas waits no longer than asked.
		var cancel context.CancelFunc
		tryCtx, cancel = context.WithTimeout(ctx, lc.waitTimeout)
		defer cancel()
	}
	ok, retry, err := a.try(tryCtx, nil)
	switch {
	case err != nil && wait && (core.Retryable(ctx, err) || rw.c.Cfg.ReplicaAckRetry && errors.Is(err, ErrNotReplicated)):
		// Retried with backoff by the wait below.
	case err != nil:
		if a.uncertain {
			rwAbandon(rw.c, rw.keys, a.owner, a.secret, write, a.lease, true)
		}
		return nil, a.failure(err)
	case ok:
		return a.hold(ctx)
	case !wait:
		return nil, rw.heldHere(fmt.Errorf("%w: %q (%s lock), free again in at most %v", ErrLocked, rw.name, lockWord(write), retry), write)
	}
	waitCtx := ctx
	if lc.waitSet {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(ctx, lc.waitTimeout, &waitTimeoutError{lc.waitTimeout})
		defer cancel()
	}
	channel := rw.keys.readCh
	if write {
		channel = rw.keys.grants
	}
	defer rw.c.EndWait(&a.call)
	if err := rw.c.WaitFor(waitCtx, channel, 1, a.waitTry); err != nil {
		// Give up our place in the queue, and anything granted meanwhile,
		// so that the next waiter is not held up.
		rwAbandon(rw.c, rw.keys, a.owner, a.secret, write, a.lease, true)
		return nil, a.failure(err)
	}
	return a.hold(ctx)
}

// rwAcquisition is one RLock or Lock call's first acquisition, retried while
// waiting under one owner id (so a re-check finds what a release granted it).
type rwAcquisition struct {
	rw     *RWMutex
	write  bool
	owner  string
	secret string // proves grant messages to this owner (see parseWriteGrant)
	lease  time.Duration
	renew  bool
	// via is the owner field of the caller's write hold (a read lock under
	// it).
	via string
	// persist: a downgrade that waits for the replicas while ctx lasts
	// (WithReplicaAckRetry).
	persist bool

	ticket core.Ticket // dates the command that granted the lease
	token  uint64
	count  int64
	// uncertain: an attempt's reply was lost; it may still run late.
	uncertain bool
	sawHolder bool  // Redis said the lock is taken
	lastErr   error // the last attempt failed to reach Redis (or Redis refused)

	// queuedAt dates the last attempt that queued this owner, at the place
	// numbered queuedArrival: a grant to that place was made after it, so a
	// lease it grants starts later than queuedAt (see handedOff).
	queuedAt      core.Ticket
	queuedArrival uint64
	// arrival is queuedArrival for keepData's rule, which runs on the
	// pub/sub reading goroutine.
	arrival atomic.Uint64
	// claimed: the grant message granted the lock for the claim window only
	// (see WithClaimWindow); the hold awaits its extension.
	claimed bool
	// recheckBy is when the wait re-checks at the latest, as the last attempt
	// set it: a notice that the claims of the waiters just granted lapse
	// sooner brings it forward, never back.
	recheckBy time.Time

	call   core.Call // what Stats and the Observer learn of the call
	wokeAt time.Time // the start of the last attempt made while waiting
}

// waitTry is try for a wait: an attempt that finds the lock taken makes the
// call a waiter (see core.Client.BeginWait).
func (a *rwAcquisition) waitTry(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	ok, retry, err := a.try(ctx, w)
	if !ok && err == nil {
		a.rw.c.BeginWait(&a.call)
	}
	return ok, retry, err
}

// try makes one attempt. With w set it queues (or keeps its place) when the
// lock is taken, and tags w (a writer with its owner id, a reader with
// readTag) so that a grant reaches it; a grant that came in since the last
// attempt is taken without asking Redis (see handedOff).
func (a *rwAcquisition) try(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	c := a.rw.c
	if w != nil {
		a.wokeAt = time.Now()
		if a.write {
			w.SetTagKeeping(a.owner, a.keepData()) // a new owner id discards grants to the old one
		} else {
			w.SetTagKeeping(readTag, a.keepData())
		}
		data := w.TakeData()
		if a.handedOff(data) {
			return true, 0, nil
		}
		if d, ok := core.ParseNotice(data, MaxClaimWindow); ok && !a.recheckBy.IsZero() {
			// The waiters ahead were just granted the lock: re-check when
			// their claims lapse (a drift margin later), in case they never
			// take it up; a grant to us, if they do, wakes us before.
			if retry := min(d+core.DriftMargin(d), time.Until(a.recheckBy)); retry > 0 {
				a.recheckBy = time.Now().Add(retry)
				return false, retry, nil
			}
		}
	}
	a.recheckBy = time.Time{}
	t := c.NewTicket()
	r, err := rwAcquireScript(ctx, c, a.rw.keys, rwAcquireArgs{owner: a.owner, secret: a.secret, write: a.write, lease: a.lease,
		enqueue: w != nil, via: a.via, persist: a.persist})
	if err != nil {
		c.NoteError(err)
		// Unless it says nothing of Redis (see acquisition.try).
		if !core.SaysNothing(ctx, err) {
			a.lastErr, a.sawHolder = err, false
		}
		if _, isRedis := rueidis.IsRedisErr(err); !isRedis || r.status == 1 {
			// The next attempt finds what this one took. (Status 1 with an
			// error: the script took the lock, WAIT failed; WithReplicaAck.)
			// Only a round trip may confirm a grant from now on.
			a.uncertain = true
			a.queuedAt, a.queuedArrival = core.Ticket{}, 0
			a.arrival.Store(0)
		}
		return false, 0, err
	}
	a.lastErr = nil
	switch r.status {
	case 1:
		if c.Unacked(r.acked) {
			return a.unacked(ctx, w, r.acked)
		}
		a.ticket, a.token, a.count = t, r.token, r.count
		return true, 0, nil
	case 0:
		a.sawHolder = true
		retry := c.RetryAfter(r.wait)
		if w != nil {
			a.queuedAt, a.queuedArrival = t, r.arrival
			a.arrival.Store(r.arrival)
			// Re-check often enough to keep our place (see Mutex).
			retry = min(retry, recheckCap(c))
			a.recheckBy = time.Now().Add(retry)
		}
		return false, retry, nil
	case -1:
		return false, 0, fmt.Errorf("%w: %w", ErrNotHeld, errWriteHoldGone)
	default: // abandoned owner: never reuse it
		a.owner, a.secret, a.queuedAt, a.queuedArrival = c.NewID(), newSecret(), core.Ticket{}, 0
		a.arrival.Store(0)
		return false, 0, nil
	}
}

// handedOff reports whether a release granted the lock to this owner: a
// message proven with our secret (data, taken from the waiter) names the
// place our last attempt saw. The grant runs for the claim window (or the
// lease, when shorter; see WithClaimWindow) from a moment after queuedAt,
// which then dates the hold; when that leaves less than half the window, the
// caller confirms with a round trip instead (rw_acquire.lua finds the hold and
// sets its whole lease), so a hold never starts nearly expired. A WithLease
// hold confirms a grant shorter than its lease the same way (the watchdog,
// which extends claims, does not renew it), and so does every grant with
// WithReplicaAck (a round trip followed by WAIT covers it). A grant to an
// earlier place (read late) names another arrival number and is ignored.
func (a *rwAcquisition) handedOff(data string) bool {
	claim := a.claim()
	if data == "" || a.queuedArrival == 0 || a.queuedAt.At().IsZero() || time.Since(a.queuedAt.At()) > claim/2 ||
		(claim < a.lease && !a.renew) || a.rw.c.Acking() {
		return false
	}
	parse := parseReadGrant
	if a.write {
		parse = parseWriteGrant
	}
	token, ok := parse(data, a.secret, a.queuedArrival)
	if !ok {
		return false
	}
	a.ticket, a.token, a.count = a.queuedAt, token, 1
	a.claimed = claim < a.lease
	return true
}

// keepData is the rule by which w keeps a message to this waiter until try
// takes it (see core.KeepData): a later message, which anyone may publish,
// never displaces a grant proven with our secret for the place our last
// attempt saw, nor does a notice displace a wake that re-checks sooner.
func (a *rwAcquisition) keepData() func(held, next string) bool {
	secret, parse := a.secret, parseReadGrant
	if a.write {
		parse = parseWriteGrant
	}
	return core.KeepData(func(data string) (uint64, bool) {
		return parse(data, secret, a.arrival.Load())
	}, MaxClaimWindow)
}

// claim is how long a grant to this owner while it is queued runs for.
func (a *rwAcquisition) claim() time.Duration { return min(a.lease, a.rw.c.Cfg.ClaimWindow) }

// failure is the error of a call that ends without the lock (see
// acquisition.failure).
func (a *rwAcquisition) failure(err error) error { return a.rw.heldHere(a.why(err), a.write) }

// heldHere is heldHere for the holds of rw this Client has that keep a call
// for the write lock (write) or a read lock out.
func (rw *RWMutex) heldHere(err error, write bool) error {
	return heldHere(err, func() bool {
		return rw.c.Holding(rwWriteKind, rw.keys.writer) || write && rw.c.Holding(rwReadKind, rw.keys.readers)
	})
}

func (a *rwAcquisition) why(err error) error {
	rw := a.rw
	var timeout *waitTimeoutError
	timedOut := errors.As(err, &timeout)
	waitOver := timedOut || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	what := lockWord(a.write) + " lock"
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, errWriteHoldGone):
		return fmt.Errorf("%w: read lock %q: %w", ErrNotHeld, rw.name, core.Inner(ErrLeaseLost))
	case !waitOver && core.Transient(err):
		// One attempt (TryLock, TryRLock), and Redis could not be reached.
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, what, rw.name, err)
	case !waitOver:
		return rw.wrap(what, err)
	case errors.Is(a.lastErr, ErrNotReplicated):
		// Redis answered; the replicas did not acknowledge in time.
		return fmt.Errorf("rlock: %s %q: %w; last attempt: %w", what, rw.name, err, core.Inner(a.lastErr))
	case a.lastErr != nil && errors.Is(err, a.lastErr):
		// The wait's error names it already (see core.WaitWith).
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, what, rw.name, err)
	case a.lastErr != nil:
		return fmt.Errorf("%w: %s %q: %w; last error: %w", ErrUnavailable, what, rw.name, err, a.lastErr)
	case timedOut && a.sawHolder:
		return fmt.Errorf("%w: %q (%s) after waiting %v: %w", ErrLocked, rw.name, what, timeout.d, context.DeadlineExceeded)
	case timedOut:
		return fmt.Errorf("%w: %s %q: no answer from Redis: %w", ErrUnavailable, what, rw.name, err)
	case a.sawHolder && errors.Is(err, context.DeadlineExceeded):
		// ctx's own deadline ended a wait behind another owner.
		return fmt.Errorf("%w: %q (%s): %w", ErrLocked, rw.name, what, core.Inner(err))
	}
	return rw.wrap(what, err)
}

// hold turns a successful acquisition into a lock context. If ctx ended in
// the meantime the hold is given back, so a cancelled call never leaves one.
// The lock context ends with this hold only (see core.LockContext): a read
// lock taken under a write lock outlives the write Unlock (a downgrade).
func (a *rwAcquisition) hold(ctx context.Context) (context.Context, error) {
	rw := a.rw
	if c := &a.call; c.Waited {
		c.Via, c.HandOff = core.ViaHandOff, time.Since(a.wokeAt)
	}
	lockCtx, cancel := core.LockContext(ctx)
	write := a.write
	kind, key, name := rwReadKind, rw.keys.readers, rw.rname
	if write {
		kind, key, name = rwWriteKind, rw.keys.writer, rw.wname
	}
	h := rw.c.NewHold(kind, rw.name, key, a.owner, a.token, a.lease, a.renew, cancel)
	h.Ctx = lockCtx
	h.SetCount(a.count)
	h.LateAttempts = a.uncertain
	h.GiveBack = func(ctx context.Context) error {
		lease, _ := h.Lease()
		err := rwAbandonScript(ctx, rw.c, rw.keys, h.Owner, "-", write, lease, h.LateAttempts)
		rw.c.NoteError(err)
		return err
	}
	if err := ctx.Err(); err != nil || !rw.c.Register(h) {
		h.End(ErrUnlocked)
		rwAbandon(rw.c, rw.keys, a.owner, a.secret, write, a.lease, true)
		if err == nil {
			err = ErrClosed
		}
		return nil, rw.wrap(lockWord(write)+" lock", err)
	}
	if a.claimed {
		h.StartClaimed(a.ticket, a.claim())
	} else {
		h.Start(a.ticket)
	}
	outer, _ := ctx.Value(holdsKey{}).(*holdLink)
	l := &holdLink{c: rw.c, name: name, h: h, outer: outer}
	core.WatchDrop(rw.c, l, &core.Dropped{What: "rwmutex " + lockWord(write) + " lock", Name: rw.name, Owner: h.Owner,
		Release: func() (bool, error) { return rw.releaseDropped(h, write) }, Hold: h})
	return context.WithValue(lockCtx, holdsKey{}, l), nil
}

// releaseDropped releases every level of h, whose lock context the program
// dropped (see core.WatchDrop and Mutex.releaseDropped).
func (rw *RWMutex) releaseDropped(h *core.Hold, write bool) (released bool, err error) {
	for {
		before, _ := h.Count()
		err := rw.release(context.Background(), h, write, rw.c.NewID())
		switch {
		case errors.Is(err, ErrNotHeld) && !released:
			return false, nil // ended meanwhile
		case err != nil:
			return released, err
		}
		released = true
		if ended(h) {
			return true, nil
		}
		if after, _ := h.Count(); after >= before {
			return true, fmt.Errorf("rlock: release %s lock %q: the hold count did not fall (%d, then %d)", lockWord(write), rw.name, before, after)
		}
	}
}

// reenter adds a level to h, idempotently per request, as Mutex.reenter does:
// a count raised in Redis but unknown here would never be unlocked, so the
// call is not abandoned halfway; an outcome still unknown after the unlock
// timeout gives the whole hold up.
func (rw *RWMutex) reenter(ctx context.Context, h *core.Hold, write bool, lc lockConfig) (context.Context, error) {
	h.Serial.Lock()
	defer h.Serial.Unlock()
	what := lockWord(write)
	if e, cause := h.State(); e {
		return nil, rw.notHeld(what, cause)
	}
	lease, renewed := h.Lease()
	newLease := lease
	if lc.leaseSet {
		newLease = lc.lease
		h.SetLease(newLease, false) // a fixed lease from now on
	}
	callCtx, cancel := rw.c.UnlockContext(ctx)
	defer cancel()
	requestID := rw.c.NewID()
	t := h.Send(newLease)
	var r rwAcquireReply
	err := core.RetryTransient(callCtx, func() (err error) {
		r, err = rwAcquireScript(callCtx, rw.c, rw.keys, rwAcquireArgs{owner: h.Owner, write: write, lease: newLease, reentry: requestID,
			persist: rw.c.Cfg.ReplicaAckRetry})
		rw.c.NoteError(err)
		return err
	})
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis && r.status != 1 {
			// Refused before it changed anything. (Status 1: the script
			// counted the re-entry, and WAIT, with WithReplicaAck, was
			// refused.)
			h.SetLease(lease, renewed)
			return nil, rw.wrap("re-enter "+what+" lock", err)
		}
		ae := h.Abandon("re-enter", err, func(ctx context.Context) error {
			return rwAbandonScript(ctx, rw.c, rw.keys, h.Owner, "-", write, newLease, false)
		})
		return nil, rw.wrap("re-enter "+what+" lock", ae)
	}
	if r.status != 1 {
		h.End(ErrLeaseLost)
		return nil, rw.notHeld(what, ErrLeaseLost)
	}
	h.Extend(t, newLease)
	if rw.c.Unacked(r.acked) {
		return nil, rw.reentryUnacked(callCtx, h, write, newLease, r.acked)
	}
	h.SetCount(r.count)
	return ctx, nil
}

func (rw *RWMutex) unlock(lockCtx context.Context, write bool) error {
	if rw.err != nil {
		return rw.err
	}
	wl, rl := rw.links(lockCtx)
	l := rl
	if write {
		l = wl
	}
	if rw.c == nil || rw.c.Obs == nil {
		if l == nil {
			return rw.noHold(lockCtx, write)
		}
		return rw.release(lockCtx, l.h, write, rw.c.NewID())
	}
	start := time.Now()
	var err error
	final := false
	if l == nil {
		err = rw.noHold(lockCtx, write)
	} else if err = rw.release(lockCtx, l.h, write, rw.c.NewID()); err == nil {
		final, _ = l.h.State()
	}
	kind, op := rwReadKind, "RUnlock"
	if write {
		kind, op = rwWriteKind, "Unlock"
	}
	rw.c.Released(lockCtx, kind, op, rw.name, start, final, err)
	return err
}

// release drops one level of h (see Mutex.release): retried with one request
// id for up to the unlock timeout, and the hold given up when its outcome
// stays unknown.
func (rw *RWMutex) release(lockCtx context.Context, h *core.Hold, write bool, requestID string) error {
	h.Serial.Lock()
	defer h.Serial.Unlock()
	what := lockWord(write)
	if e, cause := h.State(); e {
		return rw.notHeld(what, cause)
	}
	h.BeginRelease()
	defer h.EndRelease()
	ctx, cancel := rw.c.UnlockContext(lockCtx)
	defer cancel()
	lease, _ := h.Lease()
	t := h.Send(lease)
	var left int64
	err := core.RetryTransient(ctx, func() (err error) {
		left, err = rwReleaseScript(ctx, rw.c, rw.keys, h.Owner, write, requestID, lease, h.LateAttempts)
		rw.c.NoteError(err)
		return err
	})
	switch {
	case err != nil:
		ae := h.Abandon("unlock", err, func(ctx context.Context) error {
			return rwAbandonScript(ctx, rw.c, rw.keys, h.Owner, "-", write, lease, h.LateAttempts)
		})
		return rw.wrap("unlock "+what+" lock", ae)
	case left < 0:
		h.End(ErrLeaseLost)
		return rw.notHeld(what, ErrLeaseLost)
	case left == 0:
		h.End(ErrUnlocked)
	default:
		h.SetCount(left)
		h.Extend(t, lease)
	}
	return nil
}
