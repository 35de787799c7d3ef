package rlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// A Lock call moves through these states (re-entry is separate: see reenter):
//
//	attempt   one acquire.lua without queueing; skipped when goroutines of
//	          this Client already hold or wait for the lock
//	            acquired -> held; taken -> (TryLock: fail) cohort or queued
//	cohort    a watchdog Lock waits in its Client (see cohort.go) until it is
//	            passed the lock -> held
//	            made the leader with a place queued for it -> queued (presumed)
//	            a place the Client's last release reserved (see
//	            cohorts.reserve), taken at once -> queued (presumed)
//	            made the leader without one -> queued
//	            wait over -> failed
//	          (leaving for a pass, a place queued for it, or failure, it
//	          gives up the owner id of its attempt, which a lost reply may
//	          have left holding the lock: see giveUpOwner)
//	queued    subscribed to the lock's channel, queued in Redis under one
//	          owner id for the whole call, re-checking on wake-ups and at the
//	          holder's lease end
//	            acquire.lua says acquired, or a hand-off message proven with
//	            the waiter's secret -> held
//	            a pass from this Client's holder -> held (place given up)
//	            wait over (ctx, wait timeout, Close) -> failed (place given up)
//	held      a Hold is registered; the lock context is returned
//
// A fair Mutex (Client.FairMutex, WithFIFO) skips the cohort state and takes
// no lock kept for its Client: a blocking Lock goes attempt -> queued, its own
// owner id queued in Redis whatever other goroutines of its Client do, so the
// Redis queue's order is the acquisition order; once held it forms no cohort,
// and its final release always goes through Redis (see Mutex.release).
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
	a := &acquisition{m: m, owner: m.c.NewID(), secret: newSecret(), lease: m.c.Cfg.WatchdogTimeout, renew: true, watchDrop: !lc.member}
	// The call's record lives in a, copied out as the call returns: a
	// pointer kept in a would cost every Lock an allocation.
	defer a.call.CopyTo(call)
	if lc.leaseSet {
		a.lease, a.renew = lc.lease, false
	}
	if a.renew && !m.fair {
		// The lock kept for this Client after its last Unlock (a turn).
		if a.pass = m.t.unpark(m); a.pass != nil {
			a.call.Via = core.ViaKept
			return a.hold(ctx)
		}
	}
	// The wait timeout starts with the wait: a local one, or after the first
	// attempt.
	waitCtx := ctx
	var cancelWait context.CancelFunc
	defer func() {
		if cancelWait != nil {
			cancelWait()
		}
	}()
	startWait := func() {
		if lc.waitSet && cancelWait == nil {
			waitCtx, cancelWait = context.WithTimeoutCause(ctx, lc.waitTimeout, &waitTimeoutError{lc.waitTimeout})
		}
	}
	defer a.leave()
	joinCohort := func() (done bool, lockCtx context.Context, err error) {
		lw, lead := m.t.join(m.name)
		a.lw = lw
		if lead {
			return false, nil, nil
		}
		a.sawHolder = true // this Client holds the lock, or waits for it in Redis
		m.c.BeginWait(&a.call)
		startWait()
		select {
		case <-lw.ready:
		case <-waitCtx.Done():
			a.giveUpOwner() // its first attempt may have queued it, or more
			return true, nil, a.failure(core.CtxError(waitCtx))
		}
		if a.pass = m.t.take(lw, nil); a.pass != nil {
			lockCtx, err = a.hold(ctx)
			return true, lockCtx, err
		}
		if p := m.t.takePromotion(lw); p != nil {
			// The release that ended our Client's turn queued us in Redis,
			// under an owner id of its own.
			a.giveUpOwner()
			a.owner, a.secret, a.queued, a.queuedAt, a.queuedFence = p.owner, p.secret, true, p.queuedAt, p.fence
			a.presumeQueued, a.presumedRetry = !p.check, p.retryIn
			if err := m.c.WaitWith(waitCtx, p.w, a.waitTry); err != nil {
				abandon(m.c, m.keys, a.owner, a.secret, a.lease, true)
				return true, nil, a.failure(err)
			}
			lockCtx, err = a.hold(ctx)
			return true, lockCtx, err
		}
		return false, nil, nil // the leader now: queue in Redis
	}
	a.cohort = wait && a.renew && !m.fair
	// A first attempt, unless the lock is known to be contended: goroutines
	// of this Client hold or wait for it (then the attempt could only fail).
	// A blocking Lock whose channel is subscribed already (it lingers after
	// this Client's last wait: a worker locking in a loop) skips it too: one
	// script then acquires or queues, with no hand-off message to miss.
	firstAttempt := !(a.cohort && m.t.active(m.name)) && (!wait || m.c.Mux.Waiting(m.keys.grants) == 0)
	var early *mux.Waiter
	if firstAttempt && wait {
		if early = m.c.Mux.SubscribeIfLive(m.keys.grants, 1); early != nil {
			firstAttempt = false
		}
	}
	if firstAttempt {
		ok, wait2, err := a.try(ctx, nil)
		switch {
		case err != nil && wait && (core.Retryable(ctx, err) || m.c.Cfg.ReplicaAckRetry && errors.Is(err, ErrNotReplicated)):
			// A dropped connection is no reason to give up a blocking Lock:
			// the wait below retries with backoff while ctx lasts.
		case err != nil:
			if a.uncertain {
				abandon(m.c, m.keys, a.owner, a.secret, a.lease, true)
			}
			return nil, a.failure(err)
		case ok:
			return a.hold(ctx)
		case !wait:
			return nil, m.heldHere(fmt.Errorf("%w: %q, free again in at most %v", ErrLocked, m.name, wait2))
		}
	}
	if a.cohort {
		if done, lockCtx, err := joinCohort(); done {
			if early != nil {
				early.Leave(true)
			}
			return lockCtx, err
		}
	}
	// A wait that no attempt of this call preceded starts its timeout once
	// its own first attempt has returned: however short the timeout, Redis
	// has its say (the lock is taken, or Redis cannot be reached) before it
	// ends the call.
	var timeout time.Duration
	if firstAttempt || cancelWait != nil {
		startWait()
	} else if lc.waitSet {
		timeout = lc.waitTimeout
	}
	cause := &waitTimeoutError{lc.waitTimeout}
	if early != nil {
		err = m.c.WaitWithin(waitCtx, timeout, cause, early, a.waitTry)
	} else {
		err = m.c.WaitForWithin(waitCtx, timeout, cause, m.keys.grants, 1, a.waitTry)
	}
	if err != nil {
		// Give up our place in the queue (and anything the last attempt
		// may have taken), so the next waiter is not held up.
		abandon(m.c, m.keys, a.owner, a.secret, a.lease, true)
		return nil, a.failure(err)
	}
	return a.hold(ctx)
}

// waitTimeoutError is the cause of a wait that ran out of WithWaitTimeout;
// acquisition.failure tells what it means.
type waitTimeoutError struct{ d time.Duration }

func (e *waitTimeoutError) Error() string { return "wait timeout of " + e.d.String() + " ran out" }

func (e *waitTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// acquisition is one Lock call's first acquisition, retried while waiting.
type acquisition struct {
	m      *Mutex
	owner  string // owner id, kept for the whole call (see the states above)
	secret string // proves hand-off messages to this owner (see parseGrant)
	lease  time.Duration
	renew  bool
	ticket core.Ticket // dates the command that granted the lease (or an earlier one)
	reply  acquireReply
	// queuedAt dates the last attempt that found the lock taken (and queued
	// this owner). A release that hands the lock to this owner runs after
	// that attempt, so a lease granted by it starts later than queuedAt.
	queuedAt core.Ticket
	// queuedFence is the fencing counter at that attempt: only a hand-off
	// with higher tokens was sent after it. An older one, read late (the
	// process was paused, say), granted a lease that may be long gone.
	queuedFence uint64
	queued      bool // an attempt may have queued this owner in Redis
	// uncertain: an attempt's reply was lost; it may still run late.
	uncertain bool
	// What the last attempt learned, for the error of a call that fails.
	sawHolder bool  // Redis said another owner holds the lock
	lastErr   error // the attempt failed to reach Redis (or Redis refused)
	// presumeQueued: a release queued this owner (see promotion); the first
	// attempt only waits, presumedRetry at most.
	presumeQueued bool
	presumedRetry time.Duration
	cohort        bool // a blocking Lock with the watchdog's lease: it may join a cohort

	// claimed: the hand-off message granted the lock for the claim window
	// only (see WithClaimWindow); the hold awaits its extension.
	claimed bool
	// recheckBy is when the wait re-checks at the latest, as the last attempt
	// set it: a notice that the claim of the waiter ahead lapses sooner
	// brings it forward, never back.
	recheckBy time.Time

	call   core.Call // what Stats and the Observer learn of the call
	wokeAt time.Time // the start of the last attempt made while waiting

	lw    *localWaiter // the wait for a local pass (see cohort.go), if any
	pass  *cohortPass  // the lock passed on by a hold of this Client
	watch *mux.Waiter  // hears messages to this owner once it holds (see cohort.watch)
	// watchDrop: release the hold if its lock context is dropped without
	// Unlock (see Mutex.withHold); off for a MultiLock's members.
	watchDrop bool
}

// try makes one attempt. With w set it queues in Redis while the lock is
// taken, and tags w with the owner id, so that a release can hand it the lock
// by name; a hand-off that came in since the last attempt is taken without
// asking Redis.
func (a *acquisition) try(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	c := a.m.c
	if a.lw != nil {
		if a.pass = a.m.t.take(a.lw, w); a.pass != nil {
			return true, 0, nil
		}
	}
	if w != nil {
		a.wokeAt = time.Now()
		// A new owner id discards hand-offs to the old one.
		w.SetTagKeeping(a.owner, a.keepData())
		data := w.TakeData()
		if a.handedOff(data) {
			a.listen(w)
			return true, 0, nil
		}
		a.queued = true
		if a.presumeQueued {
			a.presumeQueued = false
			a.recheckBy = time.Now().Add(a.presumedRetry)
			return false, a.presumedRetry, nil
		}
		if d, ok := core.ParseNotice(data, MaxClaimWindow); ok && !a.recheckBy.IsZero() {
			// The waiter ahead was just handed the lock: re-check when its
			// claim lapses (a drift margin later), in case it never takes
			// the lock up; its grant to us, if it does, wakes us before.
			if retry := min(d+core.DriftMargin(d), time.Until(a.recheckBy)); retry > 0 {
				a.recheckBy = time.Now().Add(retry)
				return false, retry, nil
			}
		}
	}
	a.recheckBy = time.Time{}
	t := c.NewTicket()
	r, err := acquireScript(ctx, c, a.m.keys, acquireArgs{owner: a.owner, secret: a.secret, lease: a.lease, enqueue: w != nil})
	if err != nil {
		c.NoteError(err)
		// Unless it says nothing of Redis (the wait ending mid-call, another
		// caller's deadline closing the connection): then what the attempts
		// before it learned stands.
		if !core.SaysNothing(ctx, err) {
			a.lastErr, a.sawHolder = err, false
		}
		if _, isRedis := rueidis.IsRedisErr(err); !isRedis || r.status == 1 {
			// (status 1 with an error: the script took the lock, WAIT
			// failed; WithReplicaAck.)
			// The script may have run, or may still run: this owner may
			// hold the lock or a place in the queue. Keep the owner, so that
			// the next attempt finds either; only a round trip may confirm a
			// hand-off from now on.
			a.uncertain = true
			a.queuedAt = core.Ticket{}
		}
		return false, 0, err
	}
	a.lastErr = nil
	switch r.status {
	case 1:
		if c.Cfg.ReplicaAck > 0 && r.acked < int64(c.Cfg.ReplicaAck) {
			return a.unacked(ctx, w, r.acked)
		}
		a.reply, a.ticket = r, t
		if w != nil {
			a.listen(w)
		}
		return true, 0, nil
	case 0:
		a.sawHolder = true
		retry := c.RetryAfter(r.wait)
		if w != nil {
			a.queuedAt, a.queuedFence = t, r.fence
			// Re-check at least as often as the script was told (see
			// recheckCap), which keeps our place in the queue. (Behind a
			// renewed hold the holder's lease bounds it sooner: a blocked
			// waiter costs about one script call per 20-30s.)
			retry = min(retry, recheckCap(c))
			a.recheckBy = time.Now().Add(retry)
		}
		return false, retry, nil
	default: // abandoned owner: a previous call gave it up; never reuse it
		a.owner, a.secret, a.queuedAt = c.NewID(), newSecret(), core.Ticket{}
		return false, 0, nil
	}
}

// waitTry is try for a wait: an attempt that finds the lock taken makes the
// call a waiter (see core.Client.BeginWait).
func (a *acquisition) waitTry(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	ok, retry, err := a.try(ctx, w)
	if !ok && err == nil {
		a.m.c.BeginWait(&a.call)
	}
	return ok, retry, err
}

// handedOff reports whether a release handed the lock to this owner: a
// message proven with our secret (data, taken from the waiter) woke it. The
// grant runs for the claim window (or the lease, when shorter; see
// WithClaimWindow) from a moment after queuedAt, which then dates the hold;
// when that leaves less than half the window, the caller confirms with a
// round trip instead (acquire.lua finds the hold and sets its whole lease),
// so a hold never starts nearly expired. A WithLease hold confirms a grant
// shorter than its lease the same way: the watchdog, which extends claims,
// does not renew it. A hand-off sent before the last attempt (its tokens are
// not above the fencing counter that attempt saw) is stale, read late, and
// ignored.
func (a *acquisition) handedOff(data string) bool {
	g, ok := parseGrant(data, a.secret)
	claim := a.claim()
	if !ok || a.queuedAt.At().IsZero() || g.first <= a.queuedFence || time.Since(a.queuedAt.At()) > claim/2 ||
		(claim < a.lease && !a.renew) {
		return false
	}
	if a.m.c.Cfg.ReplicaAck > 0 {
		// The hand-off was written by the releaser's connection: confirm
		// it with a round trip (acquire.lua re-sets the lease of the hold
		// it finds) followed by WAIT on ours, which covers the hand-off too.
		return false
	}
	a.reply = acquireReply{status: 1, token: g.first, last: g.last, count: 1, left: g.left}
	a.ticket = a.queuedAt
	a.claimed = claim < a.lease
	return true
}

// keepData is the rule by which w keeps a message to this owner until try
// takes it (see core.KeepData): a later message, which anyone may publish,
// never displaces a hand-off proven with our secret, nor does a notice
// displace a wake that re-checks sooner.
func (a *acquisition) keepData() func(held, next string) bool { return keepHandOff(a.secret) }

// keepHandOff is that rule for a waiter with secret.
func keepHandOff(secret string) func(held, next string) bool {
	return core.KeepData(func(data string) (uint64, bool) {
		g, ok := parseGrant(data, secret)
		return g.first, ok
	}, MaxClaimWindow)
}

// giveUpOwner abandons the owner id of the call's attempts so far, when one
// of them may have left it in Redis: queued, or, its reply lost, even holding
// the lock (acquire.lua may still run late: the tombstone refuses it). The
// call is about to take the lock under another owner id (a local pass, a
// place its Client's release queued) or to fail; leaving the id behind would
// leave the lock held or blocked by it for a whole lease.
func (a *acquisition) giveUpOwner() {
	if a.queued || a.uncertain {
		abandon(a.m.c, a.m.keys, a.owner, a.secret, a.lease, a.uncertain)
		a.queued, a.uncertain = false, false
	}
}

// claim is how long a hand-off to this owner grants the lock for.
func (a *acquisition) claim() time.Duration { return min(a.lease, a.m.c.Cfg.ClaimWindow) }

// listen keeps hearing messages addressed to this owner once it holds the
// lock, from a subscription that has been live since before the acquisition
// (w's): ForceUnlock tells a holder so (see cohort.watch).
func (a *acquisition) listen(w *mux.Waiter) {
	if !a.renew || a.m.fair || a.watch != nil {
		return // only cohorting watchdog holds pass the lock on
	}
	if l := a.m.c.Mux.SubscribeIfLive(a.m.keys.grants, 1); l != nil {
		l.IgnoreBudget()
		l.SetTag(a.owner)
		a.watch = l
	}
}

// leave ends what the call still has in its Client when it returns: its place
// among the cohort's waiters (a pass or a promotion that came as it left goes
// on to the next) and a listener no cohort took.
func (a *acquisition) leave() {
	m := a.m
	m.c.EndWait(&a.call)
	if a.lw != nil {
		p, promo := m.t.leave(m.name, a.lw)
		if p != nil {
			m.handOn(p)
		}
		if promo != nil {
			promo.w.Leave(true)
			abandon(m.c, m.keys, promo.owner, promo.secret, m.c.Cfg.WatchdogTimeout, false)
		}
	}
	if a.watch != nil {
		a.watch.Leave(true)
	}
}

// failure is the error of a Lock call that ends without the lock. Where the
// wait ran out it tells why, from what the last attempt learned: ErrLocked
// only when Redis said another owner holds the lock; ErrUnavailable, wrapping
// the last error, when Redis could not be reached or refused. An ErrLocked
// says so when the holder is this Client (see heldHere).
func (a *acquisition) failure(err error) error { return a.m.heldHere(a.why(err)) }

func (a *acquisition) why(err error) error {
	m := a.m
	var timeout *waitTimeoutError
	timedOut := errors.As(err, &timeout)
	waitOver := timedOut || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case !waitOver && core.Transient(err):
		// One attempt (TryLock), and Redis could not be reached.
		return fmt.Errorf("%w: lock %q: %w", ErrUnavailable, m.name, err)
	case !waitOver:
		return m.wrap("lock", err)
	case errors.Is(a.lastErr, ErrNotReplicated):
		// Redis answered; the replicas did not acknowledge in time.
		return fmt.Errorf("rlock: lock %q: %w; last attempt: %w", m.name, err, core.Inner(a.lastErr))
	case a.lastErr != nil && errors.Is(err, a.lastErr):
		// The wait's error names it already (see core.WaitWith).
		return core.Refused(fmt.Errorf("%w: lock %q: %w", ErrUnavailable, m.name, err))
	case a.lastErr != nil:
		return core.Refused(fmt.Errorf("%w: lock %q: %w; last error: %w", ErrUnavailable, m.name, err, a.lastErr))
	case timedOut && a.sawHolder:
		return fmt.Errorf("%w: %q after waiting %v: %w", ErrLocked, m.name, timeout.d, context.DeadlineExceeded)
	case timedOut:
		return fmt.Errorf("%w: lock %q: no answer from Redis: %w", ErrUnavailable, m.name, err)
	case a.sawHolder && errors.Is(err, context.DeadlineExceeded):
		// ctx's own deadline ended a wait behind another owner.
		return fmt.Errorf("%w: %q: %w", ErrLocked, m.name, core.Inner(err))
	}
	return m.wrap("lock", err)
}

// hold turns a successful acquisition into a lock context. If ctx ended in the
// meantime the lock is given back, so a cancelled Lock never leaves a hold.
func (a *acquisition) hold(ctx context.Context) (context.Context, error) {
	m := a.m
	a.noteVia()
	if p := a.pass; p != nil {
		a.giveUpOwner() // our place in the Redis queue is of no use now
		if err := ctx.Err(); err != nil {
			m.handOn(p)
			return nil, m.wrap("lock", err)
		}
		lockCtx, cancel := core.LockContext(ctx)
		h := m.c.NewHold(mutexKind, m.name, m.keys.lock, p.owner, p.token, p.lease, true, cancel)
		h.Ctx = lockCtx
		h.SetCount(1)
		h.LateAttempts = p.late
		m.giveBackOnLapse(h)
		if !m.c.Register(h) {
			h.End(ErrUnlocked)
			m.t.abortTransit(m.name)
			return nil, ErrClosed
		}
		h.StartFrom(p.until, p.epoch)
		h.AwaitExtension(p.claim)
		m.t.adopt(m.name, h)
		h.OnEnd(func() { m.t.dissolve(m.name, h) })
		return m.withHold(ctx, lockCtx, h, a.watchDrop), nil
	}
	lockCtx, cancel := core.LockContext(ctx)
	h := m.c.NewHold(mutexKind, m.name, m.keys.lock, a.owner, a.reply.token, a.lease, a.renew, cancel)
	h.Ctx = lockCtx
	h.SetCount(a.reply.count)
	h.LateAttempts = a.uncertain
	m.giveBackOnLapse(h)
	if err := ctx.Err(); err != nil || !m.c.Register(h) {
		h.End(ErrUnlocked)
		abandon(m.c, m.keys, a.owner, a.secret, a.lease, true)
		if err == nil {
			err = ErrClosed
		}
		return nil, m.wrap("lock", err)
	}
	if a.claimed {
		h.StartClaimed(a.ticket, a.claim())
	} else {
		h.Start(a.ticket)
	}
	if a.renew && a.reply.last > a.reply.token && a.watch != nil {
		// Tokens to spare, and a listener for ForceUnlock: local waiters
		// may be passed the lock.
		m.t.form(m.name, h, a.reply.last, a.lw, a.watch, a.reply.left > 0)
		a.watch = nil
		h.OnEnd(func() { m.t.dissolve(m.name, h) })
	}
	return m.withHold(ctx, lockCtx, h, a.watchDrop), nil
}

// noteVia records how the call got the lock, for Stats and the Observer.
func (a *acquisition) noteVia() {
	switch c := &a.call; {
	case c.Via == core.ViaKept:
	case a.pass != nil:
		c.Via, c.HandOff = core.ViaLocal, time.Since(a.pass.at)
	case c.Waited:
		c.Via = core.ViaHandOff
		if !a.wokeAt.IsZero() {
			c.HandOff = time.Since(a.wokeAt)
		}
	}
}

// withHold makes the lock context returned to the caller: lockCtx (see
// core.LockContext) carrying h, chained to the holds ctx carries. With
// watch, h is released if the program drops that context without Unlock (a
// MultiLock watches its own context instead of its members').
func (m *Mutex) withHold(ctx, lockCtx context.Context, h *core.Hold, watch bool) context.Context {
	outer, _ := ctx.Value(holdsKey{}).(*holdLink)
	l := &holdLink{c: m.c, name: m.name, h: h, outer: outer}
	if watch {
		core.WatchDrop(m.c, l, &core.Dropped{What: "mutex", Name: m.name, Owner: h.Owner,
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
		err := m.release(context.Background(), h, newRequest(m.c), releasePass)
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
	h.Serial.Lock()
	defer h.Serial.Unlock()
	if ended, cause := h.State(); ended {
		return nil, m.notHeld(cause)
	}
	lease, renewed := h.Lease()
	if lc.leaseSet {
		// A fixed lease from now on: no more renewals, and no more local
		// passes, which only a renewed hold can honour.
		m.t.dissolve(m.name, h)
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
	err := core.RetryTransient(callCtx, func() (err error) {
		r, err = acquireScript(callCtx, m.c, m.keys, acquireArgs{owner: h.Owner, lease: newLease, reentry: requestID})
		m.c.NoteError(err)
		return err
	})
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis && r.status != 1 {
			// Refused before it changed anything: the hold is as it was.
			// (Status 1: the script counted the re-entry, and WAIT, with
			// WithReplicaAck, was refused.)
			h.SetLease(lease, renewed)
			return nil, m.wrap("re-enter", err)
		}
		ae := h.Abandon("re-enter", err, func(ctx context.Context) error {
			return abandonScript(ctx, m.c, m.keys, h.Owner, "-", newLease, false)
		})
		return nil, m.wrap("re-enter", ae)
	}
	if r.status != 1 {
		h.End(ErrLeaseLost)
		return nil, m.notHeld(ErrLeaseLost)
	}
	h.Extend(t, newLease)
	if m.c.Cfg.ReplicaAck > 0 && r.acked < int64(m.c.Cfg.ReplicaAck) {
		return nil, m.reentryUnacked(callCtx, h, newLease, r.acked)
	}
	h.SetCount(r.count)
	return ctx, nil
}

// unacked gives back an acquisition that too few replicas acknowledged
// (WithReplicaAck) before the call goes on: at once, so that a failing Lock
// leaves nothing held in Redis, and under a tombstone, as the owner id is not
// used again. With WithReplicaAckRetry a waiting call tries again soon, under
// a new owner id; otherwise the attempt fails with ErrNotReplicated.
func (a *acquisition) unacked(ctx context.Context, w *mux.Waiter, acked int64) (bool, time.Duration, error) {
	m := a.m
	c := m.c
	err := notReplicated(ctx, c, acked)
	owner, secret := a.owner, a.secret
	if uerr := c.GiveBack(ctx, func(ctx context.Context) error {
		return abandonScript(ctx, c, m.keys, owner, secret, a.lease, true)
	}, func() { abandon(c, m.keys, owner, secret, a.lease, true) }); uerr != nil {
		err = fmt.Errorf("%w (giving it back failed, the lock is free at the latest in %v: %w)", err, a.lease, uerr)
	}
	a.owner, a.secret, a.queuedAt, a.queued, a.uncertain = c.NewID(), newSecret(), core.Ticket{}, false, false
	a.sawHolder = false
	if c.Cfg.ReplicaAckRetry && w != nil {
		// The wait goes on; if it runs out, the replicas are why.
		a.lastErr = notReplicated(context.WithoutCancel(ctx), c, acked)
		return false, ackRetryIn, nil
	}
	if ctx.Err() == nil {
		a.lastErr = err // not when ctx ended the WAIT: Redis was reached
	}
	return false, 0, err
}

// reentryUnacked takes back a re-entry that too few replicas acknowledged
// (WithReplicaAck): one release, so the hold count is as before the call.
// When that cannot be confirmed, the whole hold is given up, as for any
// re-entry of unknown outcome.
func (m *Mutex) reentryUnacked(ctx context.Context, h *core.Hold, lease time.Duration, acked int64) error {
	err := notReplicated(ctx, m.c, acked)
	req := newRequest(m.c)
	var r releaseReply
	uerr := core.RetryTransient(ctx, func() (e error) {
		r, e = releaseScript(ctx, m.c, m.keys, h.Owner, req, lease, successorPlace{}, false)
		m.c.NoteError(e)
		return e
	})
	switch {
	case uerr != nil:
		ae := h.Abandon("re-enter", uerr, func(ctx context.Context) error {
			return abandonScript(ctx, m.c, m.keys, h.Owner, "-", lease, false)
		})
		return m.wrap("re-enter", fmt.Errorf("%w; taking it back: %w", err, ae))
	case r.left < 1:
		// The outer hold is gone too (lost to a failover or expiry).
		h.End(ErrLeaseLost)
		return m.notHeld(fmt.Errorf("%w; %w", ErrLeaseLost, core.Inner(err)))
	}
	h.SetCount(r.left)
	return m.wrap("re-enter", err)
}
