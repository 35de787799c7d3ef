package rlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
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
	a := &rwAcquisition{rw: rw, write: write}
	defer a.Call.CopyTo(call) // see Mutex.lock
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
			a.via = wl.h.Owner()
			a.persist = wait && rw.c.Cfg.ReplicaAckRetry
			a.retry = wait
			if lc.waitSet {
				a.retryWithin = lc.waitTimeout
			}
			wait = false
		}
	}

	if a.persist && lc.waitSet {
		// A downgrade that waits for the replicas waits no longer than asked.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, lc.waitTimeout)
		defer cancel()
	}
	spec := core.Spec{Channel: rw.keys.readCh, Weight: 1, Tag: readTag, RecheckCap: recheckCap(rw.c), MaxClaim: MaxClaimWindow,
		Busy: ErrLocked, Pkg: "rlock", Op: "read lock", Name: rw.name}
	if write {
		// A writer's grant channel lingers after its Client's last write
		// wait: no sign that the lock is taken now. Queued at once, the
		// writer would shut out the readers that come until it holds.
		spec.Channel, spec.Tag, spec.Op, spec.AttemptFirst = rw.keys.grants, "", "write lock", true
	}
	startAcquisition(&a.Acquisition, rw.c, a, spec, lc, wait)
	return a.Run(ctx)
}

// rwAcquisition is one RLock or Lock call, run by the engine (see
// core.Acquisition) with the RWMutex's scripts and grants.
type rwAcquisition struct {
	core.Acquisition
	rw    *RWMutex
	write bool
	// via is the owner field of the caller's write hold (a read lock under
	// it).
	via string
	// persist: a downgrade that waits for the replicas while ctx lasts
	// (WithReplicaAckRetry).
	persist bool
	// retry: a blocking downgrade, which never waits for the lock but, as
	// any blocking call, retries while Redis cannot be reached: while ctx
	// lasts, or for retryWithin (WithWaitTimeout) after its first attempt.
	retry       bool
	retryWithin time.Duration
}

// Attempt runs rw_acquire.lua once (see core.Protocol).
func (a *rwAcquisition) Attempt(ctx context.Context, _ *core.Acquisition, enqueue, _ bool) (core.Reply, error) {
	rw := a.rw
	args := rwAcquireArgs{owner: a.Owner, secret: a.Secret, write: a.write, lease: a.Lease,
		enqueue: enqueue, via: a.via, persist: a.persist}
	var r rwAcquireReply
	var err error
	if a.retry {
		// The script is idempotent per owner: a retry finds the read hold
		// an attempt whose reply was lost took.
		err = core.RetryTransientWithin(ctx, a.retryWithin, func() error {
			r, err = rwAcquireScript(ctx, rw.c, rw.keys, args)
			return err
		})
	} else {
		r, err = rwAcquireScript(ctx, rw.c, rw.keys, args)
	}
	out := core.Reply{Token: r.token, Count: r.count, Acked: r.acked}
	switch r.status {
	case 1:
		out.Status = core.Acquired
	case 0:
		out.Status, out.Retry, out.Place = core.Taken, rw.c.RetryAfter(r.wait), r.arrival
	case -1:
		if err == nil {
			return core.Reply{Status: core.Answered}, fmt.Errorf("%w: %w", ErrNotHeld, errWriteHoldGone)
		}
	default:
		out.Status = core.OwnerGone
	}
	return out, err
}

// Parse verifies a grant to the place numbered place (see core.Protocol).
func (a *rwAcquisition) Parse(data, secret string, place uint64) (core.Reply, uint64, bool) {
	if place == 0 {
		return core.Reply{}, 0, false
	}
	parse := parseReadGrant
	if a.write {
		parse = parseWriteGrant
	}
	token, ok := parse(data, secret, place)
	return core.Reply{Status: core.Acquired, Token: token, Count: 1}, token, ok
}

// AbandonNow gives owner up at once, under a tombstone.
func (a *rwAcquisition) AbandonNow(ctx context.Context, owner, secret string) error {
	return rwAbandonScript(ctx, a.rw.c, a.rw.keys, owner, secret, a.write, a.Lease, true)
}

// GiveUp gives owner up in the background.
func (a *rwAcquisition) GiveUp(_ context.Context, owner, secret string, tombstone bool) {
	rwAbandon(a.rw.c, a.rw.keys, owner, secret, a.write, a.Lease, tombstone)
}

// Taken is the error of a Try call that found the lock taken.
func (a *rwAcquisition) Taken(retry time.Duration) error {
	return fmt.Errorf("%w: %q (%s lock), free again in at most %v", ErrLocked, a.rw.name, lockWord(a.write), retry)
}

// Fail adds what the RWMutex knows to a failed call's error.
func (a *rwAcquisition) Fail(err error) error {
	if errors.Is(err, errWriteHoldGone) {
		return fmt.Errorf("%w: read lock %q: %w", ErrNotHeld, a.rw.name, core.Inner(ErrLeaseLost))
	}
	return a.rw.heldHere(err, a.write)
}

// heldHere is heldHere for the holds of rw this Client has that keep a call
// for the write lock (write) or a read lock out.
func (rw *RWMutex) heldHere(err error, write bool) error {
	return heldHere(err, func() bool {
		return rw.c.Holding(rwWriteKind, rw.keys.writer) || write && rw.c.Holding(rwReadKind, rw.keys.readers)
	})
}

// Hold turns a successful acquisition into a lock context. If ctx ended in
// the meantime the hold is given back, so a cancelled call never leaves one.
// The lock context ends with this hold only (see core.LockContext): a read
// lock taken under a write lock outlives the write Unlock (a downgrade).
func (a *rwAcquisition) Hold(ctx context.Context, _ *core.Acquisition) (context.Context, error) {
	rw := a.rw
	lockCtx, cancel := core.LockContext(ctx)
	write := a.write
	kind, key, name := rwReadKind, rw.keys.readers, rw.rname
	if write {
		kind, key, name = rwWriteKind, rw.keys.writer, rw.wname
	}
	h := rw.c.NewHold(core.HoldSpec{Kind: kind, Name: rw.name, Key: key, Owner: a.Owner, Token: a.Reply.Token, Lease: a.Lease,
		Renew: a.Renew, Count: a.Reply.Count, LateAttempts: a.Uncertain, Ctx: lockCtx, Cancel: cancel,
		GiveBack: func(ctx context.Context, h *core.Hold) error {
			lease, _ := h.Lease()
			err := rwAbandonScript(ctx, rw.c, rw.keys, h.Owner(), "-", write, lease, h.LateAttempts())
			rw.c.NoteError(err)
			return err
		}})
	if err := ctx.Err(); err != nil || !rw.c.Register(h) {
		h.End(ErrUnlocked)
		rwAbandon(rw.c, rw.keys, a.Owner, a.Secret, write, a.Lease, true)
		if err == nil {
			err = ErrClosed
		}
		return nil, rw.wrap(lockWord(write)+" lock", err)
	}
	if a.Claimed {
		h.StartClaimed(a.Ticket, a.Claim())
	} else {
		h.Start(a.Ticket)
	}
	outer, _ := ctx.Value(holdsKey{}).(*holdLink)
	l := &holdLink{c: rw.c, name: name, h: h, outer: outer}
	core.WatchDrop(rw.c, l, &core.Dropped{What: "rwmutex " + lockWord(write) + " lock", Name: rw.name, Owner: h.Owner(),
		Release: func() (bool, error) { return rw.releaseDropped(h, write) }, Hold: h})
	return context.WithValue(lockCtx, holdsKey{}, l), nil
}

// releaseDropped releases every level of h, whose lock context the program
// dropped (see core.WatchDrop and Mutex.releaseDropped).
func (rw *RWMutex) releaseDropped(h *core.Hold, write bool) (released bool, err error) {
	for {
		before, _ := h.Count()
		err := rw.release(context.Background(), h, write, false)
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
	defer h.Serialize()()
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
	ranMaybe := false // an attempt before the last may have run, its reply lost
	err := core.RetryTransient(callCtx, func() (err error) {
		r, err = rwAcquireScript(callCtx, rw.c, rw.keys, rwAcquireArgs{owner: h.Owner(), write: write, lease: newLease, reentry: requestID,
			persist: rw.c.Cfg.ReplicaAckRetry})
		rw.c.NoteError(err)
		if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis {
			ranMaybe = true
		}
		return err
	})
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis && r.status != 1 && !ranMaybe {
			// Refused before it changed anything. (Status 1: the script
			// counted the re-entry, and WAIT, with WithReplicaAck, was
			// refused. Not so after a lost reply: the attempt before may
			// have counted it.)
			h.SetLease(lease, renewed)
			return nil, rw.wrap("re-enter "+what+" lock", err)
		}
		ae := h.Abandon("re-enter", err, func(ctx context.Context) error {
			return rwAbandonScript(ctx, rw.c, rw.keys, h.Owner(), "-", write, newLease, false)
		})
		return nil, rw.wrap("re-enter "+what+" lock", ae)
	}
	if r.status != 1 {
		h.End(ErrLeaseLost)
		return nil, rw.notHeld(what, ErrLeaseLost)
	}
	h.Extend(t, newLease)
	if rw.c.Unacked(r.acked) {
		return nil, rw.reentryUnacked(callCtx, h, write, lease, renewed, r.acked)
	}
	h.SetCount(r.count)
	return ctx, nil
}

func (rw *RWMutex) unlock(lockCtx context.Context, write bool) error {
	if rw.err != nil {
		if rw.c != nil {
			kind, op := rwReadKind, "RUnlock"
			if write {
				kind, op = rwWriteKind, "Unlock"
			}
			rw.c.Released(lockCtx, kind, op, rw.name, time.Now(), false, rw.err)
		}
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
		return rw.release(lockCtx, l.h, write, true)
	}
	start := time.Now()
	var err error
	final := false
	if l == nil {
		err = rw.noHold(lockCtx, write)
	} else if err = rw.release(lockCtx, l.h, write, true); err == nil {
		final, _ = l.h.State()
	}
	kind, op := rwReadKind, "RUnlock"
	if write {
		kind, op = rwWriteKind, "Unlock"
	}
	rw.c.Released(lockCtx, kind, op, rw.name, start, final, err)
	return err
}

// release drops one level of h (see core.Release): retried with one request
// id for up to the unlock timeout, and the hold given up when its outcome
// stays unknown. caller: Unlock or RUnlock waits for it (see
// core.Release.Caller).
func (rw *RWMutex) release(lockCtx context.Context, h *core.Hold, write bool, caller bool) error {
	r := &rwRelease{Release: core.Release{Hold: h, Op: "unlock", Ended: ErrUnlocked, Caller: caller}, rw: rw, write: write, req: newRequest(rw.c)}
	return r.Run(lockCtx, r)
}

// rwRelease is one release of an RWMutex hold (see core.Releaser).
type rwRelease struct {
	core.Release
	rw    *RWMutex
	write bool
	req   *request // one id for every attempt of the release
}

// Pass is false: an RWMutex has no turns.
func (r *rwRelease) Pass(*core.Release) bool { return false }

// Round runs rw_release.lua.
func (r *rwRelease) Round(ctx context.Context, _ *core.Release, _ core.Ticket) (core.ReleaseReply, error) {
	rw, h := r.rw, r.Hold
	var left int64
	err := core.RetryTransient(ctx, func() (err error) {
		left, err = rwReleaseScript(ctx, rw.c, rw.keys, h.Owner(), r.write, r.req, r.Lease, h.LateAttempts())
		rw.c.NoteError(err)
		return err
	})
	return core.ReleaseReply{Left: left}, err
}

// Cleanup frees the hold whatever the release did.
func (r *rwRelease) Cleanup(ctx context.Context, _ *core.Release) error {
	return rwAbandonScript(ctx, r.rw.c, r.rw.keys, r.Hold.Owner(), "-", r.write, r.Lease, r.Hold.LateAttempts())
}

func (r *rwRelease) NotHeld(cause error) error { return r.rw.notHeld(lockWord(r.write), cause) }

func (r *rwRelease) Wrap(err error) error {
	return r.rw.wrap("unlock "+lockWord(r.write)+" lock", err)
}
