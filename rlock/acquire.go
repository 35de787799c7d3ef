package rlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// A Lock call runs on the engine (see core.Acquisition for its states); the
// Mutex supplies acquire.lua and its grants (Protocol: Attempt, Parse,
// AbandonNow, GiveUp, Hold) and, for a blocking Lock with the watchdog's
// lease, its cohort (LocalTurns over core.Turns: see turns.go):
//
//	kept      the lock kept for this Client after its last Unlock (a turn)
//	local     a cohort waiter waits in its Client until it is passed the
//	          lock (-> held), given a place the Client's last release
//	          queued or reserved for it (-> queued, presumed), or made the
//	          leader (-> queued); leaving for a pass, a place, or failure,
//	          it gives up the owner id of its attempt, which a lost reply
//	          may have left holding the lock
//	queued    a hand-off message proven with the waiter's secret and with
//	          tokens above the fencing counter its last attempt saw -> held
//
// A fair Mutex (Client.FairMutex, WithFIFO) has no turns: a blocking Lock goes
// attempt -> queued, its own owner id queued in Redis whatever other
// goroutines of its Client do, so the Redis queue's order is the acquisition
// order; once held it forms no cohort, and its final release always goes
// through Redis (see Mutex.release).
//
// An attempt whose reply is lost leaves the owner id in place: the next
// attempt finds the hold or the queue place it may have made, and the hold's
// final release (or the abandon when the call fails) leaves a tombstone
// against the attempt still running late.

func (m *Mutex) lock(ctx context.Context, wait bool, opts []LockOption, call *core.Call) (context.Context, error) {
	lc, wait, err := lockCall(ctx, wait, opts, m.usable())
	if err != nil {
		return nil, err
	}
	if !m.c.Enter() {
		return nil, ErrClosed
	}
	defer m.c.Exit()
	if h := m.holdOf(ctx); h != nil {
		call.Via = core.ViaReentry
		return m.reenter(ctx, h, lc)
	}
	a := newAcquisition(m, !lc.member)
	// The call's record lives in a, copied out as the call returns: a
	// pointer kept in a would cost every Lock an allocation.
	defer a.done(call)
	startAcquisition(&a.Acquisition, m.c, a, core.Spec{Channel: m.keys.grants, Weight: 1, RecheckCap: recheckCap(m.c),
		MaxClaim: MaxClaimWindow, Busy: ErrLocked, Pkg: "rlock", Op: "lock", Name: m.name}, lc, wait)
	if a.Renew && !m.fair {
		a.Local = a // only watchdog holds of a Mutex that is not fair pass the lock on
	}
	return a.Run(ctx)
}

// acquisition is one Lock call, run by the engine with the Mutex's scripts,
// grants and cohorts.
type acquisition struct {
	core.Acquisition
	m     *Mutex
	lw    *localWaiter // the wait for a local pass (see core.Turns), if any
	pass  *cohortPass  // the lock passed on by a hold of this Client
	watch *mux.Waiter  // hears messages to this owner once it holds (see cohort.watch)
	// watchDrop: release the hold if its lock context is dropped without
	// Unlock (see Mutex.withHold); off for a MultiLock's members.
	watchDrop bool
}

// acquisitions recycles the state of Lock calls: it reaches the engine
// through interfaces, which puts it on the heap, and at some 700 bytes it
// would be the largest allocation of a Lock. Nothing keeps a pointer to it
// once Run has returned: the engine leaves its subscriptions and its place
// among the cohort's waiters before then, and what runs in the background
// (abandon) is given values, not the acquisition.
var acquisitions = sync.Pool{New: func() any { return new(acquisition) }}

func newAcquisition(m *Mutex, watchDrop bool) *acquisition {
	a := acquisitions.Get().(*acquisition)
	a.m, a.watchDrop = m, watchDrop
	return a
}

// done copies the call's record out and recycles a.
func (a *acquisition) done(call *core.Call) {
	a.Call.CopyTo(call)
	*a = acquisition{}
	acquisitions.Put(a)
}

// Attempt runs acquire.lua once (see core.Protocol).
func (a *acquisition) Attempt(ctx context.Context, _ *core.Acquisition, enqueue, _ bool) (core.Reply, error) {
	m := a.m
	r, err := acquireScript(ctx, m.c, m.keys, acquireArgs{owner: a.Owner, secret: a.Secret, lease: a.Lease, enqueue: enqueue})
	out := core.Reply{Token: r.token, Last: r.last, Count: r.count, Left: r.left, Acked: r.acked}
	switch r.status {
	case 1:
		out.Status = core.Acquired
	case 0:
		out.Status, out.Retry, out.Place = core.Taken, m.c.RetryAfter(r.wait), r.fence
	default: // abandoned owner: a previous call gave it up
		out.Status = core.OwnerGone
	}
	return out, err
}

// Parse verifies a hand-off message: proven with secret, and with tokens
// above place, the fencing counter the waiter's last attempt saw (an older
// hand-off, read late or replayed, granted a lease that may be long gone).
func (a *acquisition) Parse(data, secret string, place uint64) (core.Reply, uint64, bool) {
	g, ok := parseGrant(data, secret)
	if !ok || g.first <= place {
		return core.Reply{}, 0, false
	}
	return core.Reply{Status: core.Acquired, Token: g.first, Last: g.last, Count: 1, Left: g.left}, g.first, true
}

// AbandonNow gives owner up at once, under a tombstone.
func (a *acquisition) AbandonNow(ctx context.Context, owner, secret string) error {
	return abandonScript(ctx, a.m.c, a.m.keys, owner, secret, a.Lease, true)
}

// GiveUp gives owner up in the background.
func (a *acquisition) GiveUp(_ context.Context, owner, secret string, tombstone bool) {
	abandon(a.m.c, a.m.keys, owner, secret, a.Lease, tombstone)
}

// Taken is the error of a TryLock that found the lock taken.
func (a *acquisition) Taken(retry time.Duration) error {
	return fmt.Errorf("%w: %q, free again in at most %v", ErrLocked, a.m.name, retry)
}

// Fail says so when the holder is this Client (see heldHere).
func (a *acquisition) Fail(err error) error { return a.m.heldHere(err) }

// Kept takes the lock kept for this Client after its last Unlock.
func (a *acquisition) Kept(*core.Acquisition) bool {
	a.pass = a.m.t.Unpark(a.m.turn())
	return a.pass != nil
}

// Active tells that goroutines of this Client hold or wait for the lock:
// then an attempt could only fail.
func (a *acquisition) Active() bool { return a.m.t.Active(a.m.name) }

// WaitLocal waits in the cohort (see core.Turns) until passed the lock, given a
// place, or made the leader.
func (a *acquisition) WaitLocal(context.Context, *core.Acquisition) (core.LocalOutcome, error) {
	m := a.m
	lw, lead := m.t.Join(m.name)
	a.lw = lw
	if lead {
		return core.LocalLeader, nil
	}
	a.Contended = true // this Client holds the lock, or waits for it in Redis
	m.c.BeginWait(&a.Call)
	a.StartWait()
	select {
	case <-lw.Ready():
	case <-a.WaitCtx().Done():
		// Behind a holder, or a leader whose answer is on its way: unless
		// the leader could not reach Redis (see Turns.Unreached).
		a.Contended = !m.t.Unreached(m.name)
		return core.LocalOver, core.CtxError(a.WaitCtx())
	}
	if a.takePass(nil) {
		return core.LocalPassed, nil
	}
	if p := m.t.TakePromotion(lw); p != nil {
		// The release that ended our Client's turn queued us in Redis,
		// under an owner id of its own.
		a.Promote(p)
		return core.LocalQueued, nil
	}
	return core.LocalLeader, nil // queue in Redis
}

// TakePass takes a pass from this Client's holder that came while the call
// waited in Redis.
func (a *acquisition) TakePass(_ *core.Acquisition, w *mux.Waiter) bool {
	return a.lw != nil && a.takePass(w)
}

func (a *acquisition) takePass(w *mux.Waiter) bool {
	if a.pass = a.m.t.Take(a.lw, w); a.pass == nil {
		return false
	}
	a.Call.Via, a.Call.HandOff = core.ViaLocal, time.Since(a.pass.At)
	return true
}

// Reached tells this Client's other calls whether the attempt reached Redis.
func (a *acquisition) Reached(_ *core.Acquisition, ok bool) { a.m.t.NoteReached(a.m.name, ok) }

// Listen keeps hearing messages addressed to this owner once it holds the
// lock, from a subscription that has been live since before the acquisition
// (w's): ForceUnlock tells a holder so (see cohort.watch). What w heard
// after the grant, before the listener was tagged, counts as heard by it: a
// ForceUnlock right after the grant is told to w alone.
func (a *acquisition) Listen(_ *core.Acquisition, w *mux.Waiter) {
	if a.watch != nil {
		return
	}
	if l := a.m.c.Mux.SubscribeIfLive(a.m.keys.grants, 1); l != nil {
		l.IgnoreBudget()
		l.SetTag(a.Owner)
		if w.Followed() { // checked after SetTag: later messages reach l
			l.Notify()
		}
		a.watch = l
	}
}

// Leave ends what the call still has in its Client when it returns: its place
// among the cohort's waiters (a pass or a promotion that came as it left goes
// on to the next) and a listener no cohort took.
func (a *acquisition) Leave(*core.Acquisition) {
	m := a.m
	if a.lw != nil {
		p, promo := m.t.Leave(m.name, a.lw)
		if p != nil {
			m.handOn(p)
		}
		if promo != nil {
			promo.GiveUp(m.turn())
		}
	}
	if a.watch != nil {
		a.watch.Leave(true)
	}
}

// Hold turns a successful acquisition into a lock context. If ctx ended in
// the meantime the lock is given back, so a cancelled Lock never leaves a hold.
func (a *acquisition) Hold(ctx context.Context, _ *core.Acquisition) (context.Context, error) {
	if a.pass != nil {
		return a.holdPassed(ctx)
	}
	m := a.m
	lockCtx, cancel := core.LockContext(ctx)
	spec := m.holdSpec(a.Owner, a.Reply.Token, a.Lease, a.Renew, a.Reply.Count, a.Uncertain)
	spec.Ctx, spec.Cancel = lockCtx, cancel
	h := m.c.NewHold(spec)
	if err := ctx.Err(); err != nil || !m.c.Register(h) {
		h.End(ErrUnlocked)
		abandon(m.c, m.keys, a.Owner, a.Secret, a.Lease, true)
		if err == nil {
			err = ErrClosed
		}
		return nil, m.wrap("lock", err)
	}
	if a.Claimed {
		h.StartClaimed(a.Ticket, a.Claim())
	} else {
		h.Start(a.Ticket)
	}
	if a.Local != nil && a.Reply.Last > a.Reply.Token && a.watch != nil {
		// Tokens to spare, and a listener for ForceUnlock: local waiters
		// may be passed the lock.
		m.t.Form(m.name, h, a.Reply.Last, a.lw, a.watch, a.Reply.Left > 0)
		a.watch = nil
		h.OnEnd(func() { m.t.Dissolve(m.name, h) })
	}
	return m.withHold(ctx, lockCtx, h, a.watchDrop), nil
}

// holdPassed is Hold for a lock passed on by a hold of this Client.
func (a *acquisition) holdPassed(ctx context.Context) (context.Context, error) {
	m, p := a.m, a.pass
	a.GiveUpOwner() // our place in the Redis queue is of no use now
	if err := ctx.Err(); err != nil {
		m.handOn(p)
		return nil, m.wrap("lock", err)
	}
	lockCtx, cancel := core.LockContext(ctx)
	spec := m.holdSpec(p.Owner, p.Token, p.Lease, true, 1, p.Late)
	spec.Ctx, spec.Cancel = lockCtx, cancel
	h := m.c.NewHold(spec)
	if !m.t.TakeOver(m.turn(), h, p, ErrUnlocked) {
		return nil, ErrClosed
	}
	h.OnEnd(func() { m.t.Dissolve(m.name, h) })
	return m.withHold(ctx, lockCtx, h, a.watchDrop), nil
}

// withHold makes the lock context returned to the caller: lockCtx (see
// core.LockContext) carrying h, chained to the holds ctx carries. With
// watch, h is released if the program drops that context without Unlock (a
// MultiLock watches its own context instead of its members').
func (m *Mutex) withHold(ctx, lockCtx context.Context, h *core.Hold, watch bool) context.Context {
	outer, _ := ctx.Value(holdsKey{}).(*holdLink)
	l := &holdLink{c: m.c, name: m.name, h: h, outer: outer}
	if watch {
		core.WatchDrop(m.c, l, &core.Dropped{What: "mutex", Name: m.name, Owner: h.Owner(),
			Release: func() (bool, error) { return m.releaseDropped(h) }, Hold: h})
	}
	return context.WithValue(lockCtx, holdsKey{}, l)
}

// releaseDropped releases every level of h, whose lock context the program
// dropped (see core.WatchDrop): as Unlock would, level by level, so that a
// waiter of this Client or the head of the Redis queue gets the lock next.
// It reports whether h was still held.
func (m *Mutex) releaseDropped(h *core.Hold) (released bool, err error) {
	for {
		before, _ := h.Count()
		err := m.release(context.Background(), h, releasePass)
		switch {
		case errors.Is(err, ErrNotHeld) && !released:
			return false, nil // ended meanwhile: an Unlock in flight, a loss
		case err != nil:
			return released, err
		}
		released = true
		if ended, _ := h.State(); ended {
			return true, nil
		}
		if after, _ := h.Count(); after >= before {
			return true, fmt.Errorf("rlock: release %q: the hold count did not fall (%d, then %d)", m.name, before, after)
		}
	}
}

// reenter increments the hold count of h, idempotently per request: a retry
// whose first attempt ran returns that attempt's count. The call is not
// abandoned halfway when ctx ends, because a count raised in Redis but unknown
// to the caller would never be unlocked; when its outcome stays unknown after
// the unlock timeout, the whole hold is given up (see core.Hold.Abandon).
func (m *Mutex) reenter(ctx context.Context, h *core.Hold, lc lockConfig) (context.Context, error) {
	defer h.Serialize()()
	if ended, cause := h.State(); ended {
		return nil, m.notHeld(cause)
	}
	lease, renewed := h.Lease()
	if lc.leaseSet {
		// A fixed lease from now on: no more renewals, and no more local
		// passes, which only a renewed hold can honour.
		m.t.Dissolve(m.name, h)
		h.SetLease(lc.lease, false)
	}
	newLease := lease
	if lc.leaseSet {
		newLease = lc.lease
	}
	callCtx, cancel := m.c.UnlockContext(ctx)
	defer cancel()
	requestID := m.c.NewID()
	t := h.Send(newLease)
	var r acquireReply
	ranMaybe := false // an attempt before the last may have run, its reply lost
	err := core.RetryTransient(callCtx, func() (err error) {
		r, err = acquireScript(callCtx, m.c, m.keys, acquireArgs{owner: h.Owner(), lease: newLease, reentry: requestID})
		m.c.NoteError(err)
		if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis {
			ranMaybe = true
		}
		return err
	})
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis && r.status != 1 && !ranMaybe {
			// Refused before it changed anything: the hold is as it was.
			// (Status 1: the script counted the re-entry, and WAIT, with
			// WithReplicaAck, was refused. Not so after a lost reply: the
			// attempt before may have counted it.)
			h.SetLease(lease, renewed)
			return nil, m.wrap("re-enter", err)
		}
		ae := h.Abandon("re-enter", err, func(ctx context.Context) error {
			return abandonScript(ctx, m.c, m.keys, h.Owner(), "-", newLease, false)
		})
		return nil, m.wrap("re-enter", ae)
	}
	if r.status != 1 {
		h.End(ErrLeaseLost)
		return nil, m.notHeld(ErrLeaseLost)
	}
	h.Extend(t, newLease)
	if m.c.Cfg.ReplicaAck > 0 && r.acked < int64(m.c.Cfg.ReplicaAck) {
		return nil, m.reentryUnacked(callCtx, h, lease, renewed, r.acked)
	}
	h.SetCount(r.count)
	return ctx, nil
}

// reentryUnacked takes back a re-entry that too few replicas acknowledged
// (WithReplicaAck): one release, so the hold count is as before the call, and
// the outer hold's lease (lease, renewed or not) as before it too: the
// release sets it again in Redis. When that cannot be confirmed, the whole
// hold is given up, as for any re-entry of unknown outcome.
func (m *Mutex) reentryUnacked(ctx context.Context, h *core.Hold, lease time.Duration, renewed bool, acked int64) error {
	err := notReplicated(ctx, m.c, acked)
	req := newRequest(m.c)
	var r releaseReply
	t := h.Send(lease)
	uerr := core.RetryTransient(ctx, func() (e error) {
		r, e = releaseScript(ctx, m.c, m.keys, h.Owner(), req, lease, nil, false)
		m.c.NoteError(e)
		return e
	})
	switch {
	case uerr != nil:
		ae := h.Abandon("re-enter", uerr, func(ctx context.Context) error {
			return abandonScript(ctx, m.c, m.keys, h.Owner(), "-", lease, false)
		})
		return m.wrap("re-enter", fmt.Errorf("%w; taking it back: %w", err, ae))
	case r.left < 1:
		// The outer hold is gone too (lost to a failover or expiry).
		h.End(ErrLeaseLost)
		return m.notHeld(fmt.Errorf("%w; %w", ErrLeaseLost, core.Inner(err)))
	}
	h.SetLease(lease, renewed)
	h.Kept(t, lease)
	h.SetCount(r.left)
	return m.wrap("re-enter", err)
}

// startAcquisition readies the engine's part of a Lock call (see
// core.Acquisition): the watchdog's lease or the call's own. The owner id
// comes with the first attempt: a lock kept or passed within the Client
// needs none.
func startAcquisition(a *core.Acquisition, c *core.Client, p core.Protocol, spec core.Spec, lc lockConfig, wait bool) {
	a.C, a.Proto, a.Spec, a.Wait = c, p, spec, wait
	a.WaitTimeout, a.WaitSet = lc.waitTimeout, lc.waitSet
	a.Lease, a.Renew = c.Cfg.WatchdogTimeout, true
	if lc.leaseSet {
		a.Lease, a.Renew = lc.lease, false
	}
}

// keepHandOff is the rule by which a waiter with secret keeps a message to
// its owner id until its attempt takes it (see core.KeepData), for a place a
// release queued for it (see core.Turns.Succeed): a later message, which
// anyone may publish, never displaces a hand-off proven with the secret.
func keepHandOff(secret string) func(held, next string) bool {
	return core.KeepData(func(data string) (uint64, bool) {
		g, ok := parseGrant(data, secret)
		return g.first, ok
	}, MaxClaimWindow)
}

// waitTimeoutError is the cause of a wait that ran out of WithWaitTimeout.
type waitTimeoutError = core.WaitTimeoutError
