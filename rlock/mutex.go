package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
)

// Mutex is a reentrant distributed lock named by a string, in the style of
// Redisson's RLock. Get one from Client.Mutex.
//
// Ownership travels in the context: Lock and TryLock return a lock context
// that carries the hold, and every call that needs the owner takes it (or any
// context derived from it). Lock with a context that already holds the Mutex
// re-enters and increments the hold count; Unlock decrements it, and only the
// last Unlock frees the lock and wakes a waiter. A context that does not carry
// the hold is another owner, even in the same goroutine.
//
// The lock context is cancelled when the hold ends: with cause ErrUnlocked
// after the final Unlock, and ErrLeaseLost when the lease was lost. A lease is
// not a correctness guarantee (a paused process can outlive it); protect
// shared state with the fencing token (Token) where it matters.
type Mutex struct {
	c    *core.Client
	t    *cohorts
	name string
	err  error // invalid name, reported by every method
	keys keys
}

// Name returns the name the Mutex was created with.
func (m *Mutex) Name() string { return m.name }

// Lock blocks until it holds the lock, ctx is done, or the wait timeout of
// WithWaitTimeout runs out. It waits without polling, in a queue served in
// arrival order across processes (in turns per Client, see the package
// documentation): it sleeps until a release hands it the lock, a pub/sub
// reconnect, or the holder's lease runs out.
//
// Connection errors (a dropped or stalled connection, a restarting Redis) are
// retried with backoff until ctx ends, so bound ctx (or use WithWaitTimeout)
// when an unreachable Redis must not block the caller; other Redis errors are
// returned at once.
//
// On success it returns the lock context, derived from ctx, that carries the
// hold; pass it to Unlock. Without WithLease the watchdog renews the lease until
// Unlock. On failure nothing is held and nothing is left behind in Redis; the
// error matches ctx's error when ctx ended, ErrLocked (and
// context.DeadlineExceeded) when the wait timeout ran out.
//
// If ctx already holds the lock, Lock re-enters at once and returns ctx.
func (m *Mutex) Lock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return m.lock(ctx, true, opts)
}

// TryLock makes one attempt. It returns the lock context as Lock does, or an
// error matching ErrLocked if another owner holds the lock. A context that
// already holds the lock re-enters.
func (m *Mutex) TryLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return m.lock(ctx, false, opts)
}

func (m *Mutex) lock(ctx context.Context, wait bool, opts []LockOption) (context.Context, error) {
	lc, err := newLockConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := m.usable(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if !m.c.Enter() {
		return nil, ErrClosed
	}
	defer m.c.Exit()
	if h := m.holdOf(ctx); h != nil {
		return m.reenter(ctx, h, lc)
	}
	a := &acquisition{m: m, owner: m.c.NewID(), lease: m.c.Cfg.WatchdogTimeout, renew: true}
	if lc.leaseSet {
		a.lease, a.renew = lc.lease, false
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
			waitCtx, cancelWait = context.WithTimeoutCause(ctx, lc.waitTimeout,
				fmt.Errorf("%w: %q after waiting %v: %w", ErrLocked, m.name, lc.waitTimeout, context.DeadlineExceeded))
		}
	}
	// Goroutines of one Client wait for a lock as a cohort (see cohort.go):
	// one of them, the leader, queues in Redis; the others wait for a hold of
	// the Client to pass them the lock, or to make them the leader. A call
	// joins at once when goroutines of the Client hold or wait for the lock,
	// else after a first attempt that fails. A pass or a place in Redis that
	// comes as it leaves goes on to the next.
	defer func() {
		if a.lw != nil {
			p, promo := m.t.leave(m.name, a.lw)
			if p != nil {
				m.handOn(p)
			}
			if promo != nil {
				promo.w.Leave(false)
				abandon(m.c, m.keys, promo.owner, a.lease.Milliseconds(), false)
			}
		}
	}()
	joinCohort := func() (done bool, lockCtx context.Context, err error) {
		lw, lead := m.t.join(m.name)
		a.lw = lw
		if lead {
			return false, nil, nil
		}
		startWait()
		select {
		case <-lw.ready:
		case <-waitCtx.Done():
			return true, nil, m.wrap("lock", core.CtxError(waitCtx))
		}
		if a.pass = m.t.take(lw, nil); a.pass != nil {
			lockCtx, err = a.hold(ctx)
			return true, lockCtx, err
		}
		if p := m.t.takePromotion(lw); p != nil {
			// The release that ended our Client's turn queued us in Redis.
			a.owner, a.queued, a.queuedAt, a.queuedFence = p.owner, true, p.queuedAt, p.fence
			a.presumeQueued, a.presumedRetry = !p.check, p.retryIn
			if err := m.c.WaitWith(waitCtx, p.w, a.try); err != nil {
				abandon(m.c, m.keys, a.owner, a.lease.Milliseconds(), true)
				return true, nil, m.wrap("lock", err)
			}
			lockCtx, err = a.hold(ctx)
			return true, lockCtx, err
		}
		return false, nil, nil // the leader now: queue in Redis
	}
	a.cohort = wait && a.renew
	// A first attempt, unless the lock is known to be contended: goroutines
	// of this Client hold or wait for it (then the attempt could only fail).
	if !(a.cohort && m.t.active(m.name)) && (!wait || m.c.Mux.Waiting(m.keys.channel) == 0) {
		ok, wait2, err := a.try(ctx, nil)
		switch {
		case err != nil && wait && core.Retryable(ctx, err):
			// A dropped connection is no reason to give up a blocking Lock:
			// the wait below retries with backoff while ctx lasts.
		case err != nil:
			return nil, m.wrap("lock", err)
		case ok:
			return a.hold(ctx)
		case !wait:
			return nil, fmt.Errorf("%w: %q, free again in at most %v", ErrLocked, m.name, wait2)
		}
	}
	if a.cohort {
		if done, lockCtx, err := joinCohort(); done {
			return lockCtx, err
		}
	}
	startWait()
	if err := m.c.WaitFor(waitCtx, m.keys.channel, 1, a.try); err != nil {
		// Give up our place in the queue (and anything the last attempt
		// may have taken), so the next waiter is not held up.
		abandon(m.c, m.keys, a.owner, a.lease.Milliseconds(), true)
		return nil, m.wrap("lock", err)
	}
	return a.hold(ctx)
}

// acquisition is one Lock call's first acquisition, retried while waiting.
type acquisition struct {
	m      *Mutex
	owner  string
	lease  time.Duration
	renew  bool
	ticket core.Ticket // dates the command that granted the lease (or an earlier one)
	reply  acquireReply
	// queuedAt is when the last attempt that found the lock taken (and queued
	// this owner) was sent. A release that hands the lock to this owner runs
	// after that attempt, so a lease granted by it starts later than queuedAt.
	queuedAt core.Ticket
	// queuedFence is the fencing counter at that attempt: only a hand-off
	// with higher tokens was sent after it. An older one, read late (the
	// process was paused, say), granted a lease that may be long gone.
	queuedFence uint64
	queued      bool // an attempt may have queued this owner in Redis
	// presumeQueued: a release queued this owner (see promotion); the first
	// attempt only waits, presumedRetry at most.
	presumeQueued bool
	presumedRetry time.Duration
	cohort        bool // a blocking Lock with the watchdog's lease: it may join a cohort

	lw   *localWaiter // the wait for a local pass (see cohort.go), if any
	pass *cohortPass  // the lock passed on by a hold of this Client
}

// try makes one attempt. With w set it queues in Redis while the lock is
// taken, and tags w with the owner id, so that a release can hand it the lock
// by name; a hand-off that came in since the last attempt is taken without
// asking Redis.
func (a *acquisition) try(ctx context.Context, w *pubsub.Waiter) (bool, time.Duration, error) {
	c := a.m.c
	if a.lw != nil {
		if a.pass = a.m.t.take(a.lw, w); a.pass != nil {
			return true, 0, nil
		}
	}
	if w != nil {
		w.SetTag(a.owner) // a new owner id discards hand-offs to the old one
		if a.handedOff(w) {
			return true, 0, nil
		}
		a.queued = true
		if a.presumeQueued {
			a.presumeQueued = false
			return false, a.presumedRetry, nil
		}
	}
	a.ticket = c.NewTicket()
	r, err := acquireScript(ctx, c, a.m.keys, a.owner, a.lease, false, w != nil)
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); !isRedis {
			// The script may have run: make sure this owner holds nothing and
			// is not queued, and carry on (if at all) under a new one.
			abandon(c, a.m.keys, a.owner, a.lease.Milliseconds(), true)
			a.owner, a.queuedAt = c.NewID(), core.Ticket{}
		}
		return false, 0, err
	}
	switch r.status {
	case 1:
		a.reply = r
		return true, 0, nil
	case 0:
		retry := c.RetryAfter(r.wait)
		if w != nil {
			a.queuedAt, a.queuedFence = a.ticket, r.fence
			// Re-check often enough to keep our place in the queue, which
			// lapses two watchdog timeouts after the last check. (Behind a
			// renewed hold the holder's lease bounds it sooner: a blocked
			// waiter costs about one script call per 20-30s.)
			retry = min(retry, c.Cfg.WatchdogTimeout*4/5)
		}
		return false, retry, nil
	default: // abandoned owner: cannot happen for a fresh id, but never reuse it
		a.owner, a.queuedAt = c.NewID(), core.Ticket{}
		return false, 0, nil
	}
}

// handedOff reports whether a release handed the lock to this owner (a message
// with its fencing token woke w). The lease was granted after queuedAt, which
// then starts the hold's clock; when that leaves less than half the lease, the
// caller confirms with a round trip instead (acquire.lua finds the hold and
// sets its lease again), so a hold never starts nearly expired. A hand-off
// sent before the last attempt (its tokens are not above the fencing counter
// that attempt saw) is stale, read late, and ignored.
func (a *acquisition) handedOff(w *pubsub.Waiter) bool {
	first, last, ok := parseGrant(w.TakeData())
	if !ok || a.queuedAt.At().IsZero() || first <= a.queuedFence || time.Since(a.queuedAt.At()) > a.lease/2 {
		return false
	}
	a.reply = acquireReply{status: 1, token: first, last: last, count: 1}
	a.ticket = a.queuedAt
	return true
}

// hold turns a successful acquisition into a lock context. If ctx ended in the
// meantime the lock is given back, so a cancelled Lock never leaves a hold.
func (a *acquisition) hold(ctx context.Context) (context.Context, error) {
	m := a.m
	if p := a.pass; p != nil {
		if a.queued {
			// Our place in the Redis queue is of no use now.
			abandon(m.c, m.keys, a.owner, a.lease.Milliseconds(), false)
		}
		if err := ctx.Err(); err != nil {
			m.handOn(p)
			return nil, m.wrap("lock", err)
		}
		lockCtx, cancel := context.WithCancelCause(ctx)
		h := m.c.NewHold(mutexKind, m.keys.lock, p.owner, p.token, p.lease, true, cancel)
		h.SetCount(1)
		if !m.c.Register(h) {
			h.End(ErrUnlocked)
			m.t.abortTransit(m.name)
			return nil, ErrClosed
		}
		h.StartFrom(p.until, p.epoch)
		m.t.adopt(m.name, h)
		context.AfterFunc(lockCtx, func() { m.t.dissolve(m.name, h) })
		return m.withHold(ctx, lockCtx, h), nil
	}
	lockCtx, cancel := context.WithCancelCause(ctx)
	h := m.c.NewHold(mutexKind, m.keys.lock, a.owner, a.reply.token, a.lease, a.renew, cancel)
	h.SetCount(a.reply.count)
	if err := ctx.Err(); err != nil || !m.c.Register(h) {
		h.End(ErrUnlocked)
		abandon(m.c, m.keys, a.owner, a.lease.Milliseconds(), true)
		if err == nil {
			err = ErrClosed
		}
		return nil, m.wrap("lock", err)
	}
	h.Start(a.ticket)
	if a.renew && a.reply.last > a.reply.token {
		// Tokens to spare: local waiters may be passed the lock.
		m.t.form(m.name, h, a.reply.last, a.lw)
		context.AfterFunc(lockCtx, func() { m.t.dissolve(m.name, h) })
	}
	return m.withHold(ctx, lockCtx, h), nil
}

func (m *Mutex) withHold(ctx, lockCtx context.Context, h *core.Hold) context.Context {
	outer, _ := ctx.Value(holdsKey{}).(*holdLink)
	return context.WithValue(lockCtx, holdsKey{}, &holdLink{c: m.c, name: m.name, h: h, outer: outer})
}

// reenter increments the hold count of h. The call is not abandoned halfway
// when ctx ends, because a count raised in Redis but unknown to the caller
// would never be unlocked.
func (m *Mutex) reenter(ctx context.Context, h *core.Hold, lc lockConfig) (context.Context, error) {
	h.Serial.Lock()
	defer h.Serial.Unlock()
	if ended, cause := h.State(); ended {
		return nil, m.notHeld(cause)
	}
	lease, _ := h.Lease()
	if lc.leaseSet {
		lease = lc.lease
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.Cfg.UnlockTimeout)
	defer cancel()
	if lc.leaseSet {
		h.SetFixedLease(lease)
	}
	t := h.Send(lease)
	r, err := acquireScript(callCtx, m.c, m.keys, h.Owner, lease, true, false)
	if err != nil {
		return nil, m.wrap("re-enter", err)
	}
	if r.status != 1 {
		h.End(ErrLeaseLost)
		return nil, m.notHeld(ErrLeaseLost)
	}
	h.SetCount(r.count)
	h.Extend(t, lease)
	return ctx, nil
}

// Token returns the fencing token of the hold carried by lockCtx: a number
// that increases strictly with every first acquisition of this lock, by any
// owner, and stays the same across re-entries. A resource that remembers the
// highest token it has seen and rejects lower ones is safe even against a
// holder that outlived its lease. It fails with ErrNotHeld when lockCtx holds
// no hold of the lock (a hold that ended still reports its token).
//
// Tokens are not consecutive. A lock's counter starts from Redis's clock in
// microseconds, so that a Redis restarted without persistence, which loses the
// counter, still issues tokens above those issued before (as long as its clock
// did not go back); and a holder reserves a few at a time to pass the lock to
// goroutines of its own Client.
func (m *Mutex) Token(lockCtx context.Context) (uint64, error) {
	if m.err != nil {
		return 0, m.err
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return 0, fmt.Errorf("%w: the context holds no lock %q", ErrNotHeld, m.name)
	}
	return h.Token, nil
}

// HoldCount returns how many times the owner carried by lockCtx holds the lock
// in Redis (0 when it holds none).
func (m *Mutex) HoldCount(lockCtx context.Context) (int, error) {
	if err := m.usable(); err != nil {
		return 0, err
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return 0, nil
	}
	if ended, cause := h.State(); ended && errors.Is(cause, ErrUnlocked) {
		return 0, nil // unlocked; its owner field may have passed to another hold
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(lockCtx), m.c.Cfg.UnlockTimeout)
	defer cancel()
	n, err := m.c.RC.Do(ctx, m.c.RC.B().Hget().Key(m.keys.lock).Field(h.Owner).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, m.wrap("hold count", err)
	}
	return int(n), nil
}

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.usableWith(ctx); err != nil {
		return false, err
	}
	n, err := m.c.RC.Do(ctx, m.c.RC.B().Exists().Key(m.keys.lock).Build()).AsInt64()
	if err != nil {
		return false, m.wrap("is locked", err)
	}
	return n == 1, nil
}

// TTL returns the remaining lease of the lock: 0 when it is not locked, a
// negative duration when its key has no expiry (it was not set by this library).
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.usableWith(ctx); err != nil {
		return 0, err
	}
	pttl, err := m.c.RC.Do(ctx, m.c.RC.B().Pttl().Key(m.keys.lock).Build()).AsInt64()
	switch {
	case err != nil:
		return 0, m.wrap("ttl", err)
	case pttl == -2:
		return 0, nil
	case pttl < 0:
		return -1, nil
	}
	return time.Duration(pttl) * time.Millisecond, nil
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It reports
// whether there was a lock to delete. The former holder learns of it at its
// next renewal (its lock context is then cancelled with ErrLeaseLost) or
// Unlock (ErrNotHeld); it is an administrative tool, not a way to share a lock.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.usableWith(ctx); err != nil {
		return false, err
	}
	ok, err := forceUnlockScript(ctx, m.c, m.keys)
	if err != nil {
		return false, m.wrap("force unlock", err)
	}
	return ok, nil
}

// usableWith is usable for calls that talk to Redis with ctx.
func (m *Mutex) usableWith(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	return m.usable()
}

func (m *Mutex) usable() error {
	if m.err != nil {
		return m.err
	}
	if m.c.IsClosed() {
		return ErrClosed
	}
	return nil
}

// holdsKey finds the holds carried by a context: the innermost holdLink, which
// chains to the holds of the contexts it derives from. A hold is one per
// Client and lock name, so holds of different locks nest in one context
// chain, and the innermost hold of a lock wins. (A zero-size key and a chain
// instead of one key per lock: looking a hold up allocates nothing.)
type holdsKey struct{}

type holdLink struct {
	c     *core.Client
	name  string
	h     *core.Hold
	outer *holdLink
}

func (m *Mutex) holdOf(ctx context.Context) *core.Hold {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(holdsKey{}).(*holdLink)
	for ; l != nil; l = l.outer {
		if l.c == m.c && l.name == m.name {
			return l.h
		}
	}
	return nil
}

func (m *Mutex) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrLocked) {
		return err
	}
	return fmt.Errorf("rlock: %s %q: %w", op, m.name, err)
}

func (m *Mutex) notHeld(cause error) error {
	if cause == nil || errors.Is(cause, ErrUnlocked) {
		return fmt.Errorf("%w: %q was already unlocked by this context", ErrNotHeld, m.name)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotHeld, m.name, cause)
}

// String describes the Mutex for logs.
func (m *Mutex) String() string {
	return "rlock.Mutex(" + strconv.Quote(m.name) + ")"
}
