package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/rlock"
)

// permitKey finds a permit in a context: one per Client and semaphore name. A
// context derived from a permit context and used to acquire again carries the
// newer permit, which shadows the older one: Release each context once.
type permitKey struct {
	c    *core.Client
	name string
}

type permit struct {
	hold *core.Hold
	n    int64
}

// Acquire blocks until it holds n permits, ctx is done, or the wait timeout of
// WithWaitTimeout runs out. Waiters are served in arrival order across all
// processes (see the package documentation).
//
// ctx bounds the wait only. On success it returns the permit context that
// carries the permits; pass it, not ctx, to Release. As an rlock lock context
// (see Lock context in the rlock documentation), it keeps ctx's values but not
// its cancellation or deadline, and is cancelled exactly when the permits end:
// by Release (cause ErrReleased) or when their lease is lost (ErrLeaseLost);
// permits whose permit context the program drops without Release are released
// once it is garbage. On failure nothing is held and the waiter's place
// in the queue is given up; the error matches ctx's error when ctx ended (and
// ErrNoPermits too when ctx's deadline ended a wait behind other holders),
// ErrNoPermits and context.DeadlineExceeded when the wait timeout ran out,
// ErrUnavailable (wrapping the last connection error) when the wait ended
// while Redis could not be reached,
// ErrExceedsLimit when n is above the limit (at once, or when the limit is
// lowered below n while waiting), ErrNoLimit when no limit is set, and
// ErrNotReplicated when the Client was made with rlock.WithReplicaAck and too
// few replicas acknowledged the permits in time (they were given back; with
// rlock.WithReplicaAckRetry Acquire tries again instead while it waits).
// Connection errors are retried with backoff until ctx ends.
func (s *Semaphore) Acquire(ctx context.Context, n int64, opts ...AcquireOption) (context.Context, error) {
	return s.observedAcquire(ctx, "Acquire", n, true, opts)
}

// TryAcquire makes one attempt to take n permits without waiting. It fails
// with ErrNoPermits when they are not free now or when others are queued
// ahead, and with ErrUnavailable when Redis could not be reached.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64, opts ...AcquireOption) (context.Context, error) {
	return s.observedAcquire(ctx, "TryAcquire", n, false, opts)
}

// observedAcquire is acquire, counted in the Client's Stats and told to its
// Observer.
func (s *Semaphore) observedAcquire(ctx context.Context, op string, n int64, wait bool, opts []AcquireOption) (context.Context, error) {
	if s.c == nil || s.err != nil {
		return s.acquire(ctx, n, wait, opts, &core.Call{}) // fails: see usable
	}
	call := core.Call{Start: time.Now()}
	permitCtx, err := s.acquire(ctx, n, wait, opts, &call)
	s.c.Acquired(ctx, permitKind, op, s.name, &call, err, ErrNoPermits)
	return permitCtx, err
}

// Drain takes every permit free now, if no one is queued ahead, as one
// release-able lease, and returns how many it took. It fails with ErrNoPermits
// when none is free, and with ErrUnavailable when Redis could not be reached.
func (s *Semaphore) Drain(ctx context.Context, opts ...AcquireOption) (context.Context, int64, error) {
	a, err := s.prepare(ctx, "all", 0, opts)
	if err != nil {
		return nil, 0, err
	}
	defer s.c.Exit()
	ok, _, err := a.try(ctx, nil)
	if err != nil {
		a.giveUp(ctx)
		return nil, 0, a.failure(err)
	}
	if !ok {
		return nil, 0, fmt.Errorf("%w: %q", ErrNoPermits, s.name)
	}
	permitCtx, err := a.hold(ctx)
	return permitCtx, a.got, err
}

// An Acquire call moves through these states:
//
//	turns     (a blocking Acquire of one permit, watchdog lease, on a
//	          semaphore with turns: see turns.go) takes the lease this
//	          Client kept at its last Release -> held, no script; else joins
//	          its Client's waiters: the leader goes on to attempt, the others
//	          wait in the Client until passed a lease -> held, no script, or
//	          made the leader -> attempt
//	attempt   one sem_acquire.lua that takes the permits if they are free
//	          and nobody is queued ahead, without queueing; skipped by a
//	          blocking Acquire when this Client's grant channel for the
//	          semaphore is subscribed already (another of its waiters waits,
//	          or one did within the multiplexer's linger: the semaphore is
//	          contended), so that one script acquires or queues
//	            acquired -> held; not free -> (TryAcquire: fail) queued
//	queued    subscribed to this Client's grant channel, then queued in Redis
//	          under one permit id (and secret) for the whole call
//	            a grant message proven with the secret -> held, no script
//	            woken otherwise, or at the earliest lease end, or every third
//	            of the watchdog timeout (to keep its place): re-check with
//	            sem_acquire.lua, which finds permits handed over meanwhile
//	            wait over (ctx, wait timeout, Close) -> failed (place given up)
//	held      a Hold is registered; the permit context is returned
func (s *Semaphore) acquire(ctx context.Context, n int64, wait bool, opts []AcquireOption, call *core.Call) (context.Context, error) {
	if n < 1 || n > MaxPermits {
		return nil, fmt.Errorf("%w: permits must be between 1 and %d, got %d", ErrInvalidCount, int64(MaxPermits), n)
	}
	a, err := s.prepare(ctx, strconv.FormatInt(n, 10), n, opts)
	if err != nil {
		return nil, err
	}
	defer s.c.Exit()
	defer a.call.CopyTo(call) // a pointer kept in a would cost an allocation
	defer s.c.EndWait(&a.call)
	wait = wait && !a.cfg.tryOnce // WithWaitTimeout(0): one attempt, as TryAcquire
	if wait && s.turnsFor(n, a) {
		// The lease kept for this Client after its last Release (see turns.go).
		if p := s.turns.unpark(s); p != nil {
			a.call.Via = core.ViaKept
			return s.holdPassed(ctx, p)
		}
		lw, lead := s.turns.join(s.name)
		a.lw = lw
		defer func() {
			if p := s.turns.leave(s.name, lw); p != nil {
				s.handOn(p) // passed to us as we gave up: pass it on
			}
		}()
		if !lead {
			s.c.BeginWait(&a.call)
			permitCtx, done, err := a.waitLocal(ctx, lw)
			if done {
				return permitCtx, err
			}
			// The leader now: acquire in Redis for the Client.
			if s.c.IsClosed() {
				return nil, ErrClosed
			}
		}
	}
	var w *mux.Waiter
	if wait {
		// Contended (our grant channel is live): one script queues at once.
		w = s.c.Mux.SubscribeIfLive(s.grant, n)
	}
	if w == nil {
		// The first attempt does not join the queue: a grant published to a
		// channel this Client has not subscribed yet would reach nobody.
		ok, _, err := a.try(ctx, nil)
		switch {
		case err != nil && wait && (core.Retryable(ctx, err) || s.c.Cfg.ReplicaAckRetry && errors.Is(err, ErrNotReplicated)):
			// A dropped connection is no reason to give up a blocking Acquire:
			// the wait below retries with backoff while ctx lasts (and an
			// acquisition too few replicas acknowledged, with
			// rlock.WithReplicaAckRetry).
		case err != nil:
			a.giveUp(ctx)
			return nil, a.failure(err)
		case ok:
			return a.hold(ctx)
		case !wait:
			return nil, fmt.Errorf("%w: %q has fewer than %d free, or waiters ahead", ErrNoPermits, s.name, n)
		}
	}
	// The wait timeout starts now, after the first attempt; without one (the
	// channel was live), once the wait's own first attempt has returned:
	// however short the timeout, Redis has its say before it ends the call.
	waitCtx, timeout := ctx, time.Duration(0)
	cause := fmt.Errorf("%w: %q after waiting %v: %w", ErrNoPermits, s.name, a.cfg.waitTimeout, context.DeadlineExceeded)
	if a.cfg.waitSet && w == nil {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(ctx, a.cfg.waitTimeout, cause)
		defer cancel()
	} else if a.cfg.waitSet {
		timeout = a.cfg.waitTimeout
	}
	if w == nil {
		w, err = s.subscribe(waitCtx, n)
	}
	if err == nil {
		err = a.s.c.WaitWithin(waitCtx, timeout, cause, w, a.waitTry)
	}
	if err != nil {
		a.giveUp(ctx)
		return nil, a.failure(err)
	}
	return a.hold(ctx)
}

// failure is the error of an Acquire that ends without the permits: ErrNoPermits
// (when the wait ran out, or ctx's deadline ended it, after Redis said the
// permits are taken) or ErrUnavailable (Redis could not be reached), or what
// ended the call.
func (a *acquisition) failure(err error) error {
	s := a.s
	op := "acquire"
	if a.n == 0 {
		op = "drain"
	}
	waitOver := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case !waitOver && core.Transient(err):
		// One attempt (TryAcquire, Drain), and Redis could not be reached.
		return core.Refused(fmt.Errorf("semaphore: %s %q: %w: %w", op, s.name, core.Inner(ErrUnavailable), err))
	case waitOver && errors.Is(a.lastErr, ErrNotReplicated):
		// Redis answered; the replicas did not acknowledge in time.
		return fmt.Errorf("semaphore: %s %q: %w; last attempt: %w", op, s.name, err, core.Inner(a.lastErr))
	case waitOver && a.lastErr != nil:
		// The wait ran out while Redis could not be reached: say so, rather
		// than that no permits were free.
		ctxErr := context.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			ctxErr = context.DeadlineExceeded
		}
		return core.Refused(fmt.Errorf("semaphore: %s %q: %w: %w; last error: %w", op, s.name, core.Inner(ErrUnavailable), ctxErr, a.lastErr))
	case errors.Is(err, ErrNoPermits):
		return err
	case a.contended && errors.Is(err, context.DeadlineExceeded):
		// ctx's own deadline ended a wait behind other holders.
		return fmt.Errorf("%w: %q: %w", ErrNoPermits, s.name, err)
	}
	return s.wrap(op, err)
}

// subscribe joins this Client's grant channel for the semaphore, returning
// once Redis confirmed the subscription: a grant published afterwards reaches
// the Waiter.
func (s *Semaphore) subscribe(ctx context.Context, n int64) (*mux.Waiter, error) {
	w, err := s.c.Mux.SubscribeWeighted(ctx, s.grant, n)
	switch {
	case err == nil:
		return w, nil
	case s.c.IsClosed():
		return nil, ErrClosed
	case ctx.Err() != nil:
		// The wait ended while subscribing: report why it ended.
		return nil, core.CtxError(ctx)
	}
	return nil, err
}

func (s *Semaphore) prepare(ctx context.Context, want string, n int64, opts []AcquireOption) (*acquisition, error) {
	cfg, err := newAcquireConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if !s.c.Enter() {
		return nil, ErrClosed
	}
	a := &acquisition{s: s, want: want, n: n, cfg: cfg, lease: s.c.Cfg.WatchdogTimeout, renew: true}
	if cfg.leaseSet {
		a.lease, a.renew = cfg.lease, false
	}
	a.newID()
	return a, nil
}

// acquisition is one Acquire call, retried while waiting. It keeps one
// permit id (and secret) throughout, so that a retry after a lost reply finds
// what the lost request did: the permits it took, or its place in the queue.
type acquisition struct {
	s      *Semaphore
	id     string // permit id, and waiter id in the queue
	secret string // proves grant messages to this id (see parseGrant)
	want   string
	n      int64 // permits asked for; 0 for Drain's "all"
	cfg    acquireConfig
	lease  time.Duration
	renew  bool
	fresh  bool // no request for id was sent yet: it can hold nothing
	// ticket dates the request whose lease the permits have: the one that
	// reported them (every report sets their lease afresh), or for permits
	// handed over, queuedAt.
	ticket core.Ticket
	// queuedAt dates the last request that answered "queued" (zero when a
	// later one went unanswered). A grant to id ran after that request did,
	// so a lease it granted started after queuedAt.
	queuedAt core.Ticket
	// queuedArrival is the place that request reported: only a grant to it
	// was made after it. One to an earlier place of id, read late or
	// recorded and replayed, handed over permits that may be long gone.
	queuedArrival uint64
	traced        bool // id may be queued or hold permits: abandon it on failure
	// lw is the call's place among its Client's waiters (see turns.go); nil
	// when it takes no part in turns.
	lw *localWaiter
	// call is what Stats and the Observer learn of the call; wokeAt the
	// start of the last attempt made while waiting.
	call   core.Call
	wokeAt time.Time
	// contended: an attempt found the permits taken (others hold or wait).
	contended bool
	got       int64
	lastErr   error // the last attempt failed to reach Redis (or Redis refused)
	// claimed: the grant message handed the permits over for the claim
	// window only (see rlock.WithClaimWindow); the hold awaits its extension.
	claimed bool
	// recheckBy is when the wait re-checks at the latest, as the last attempt
	// set it: a notice that a claim ahead lapses sooner brings it forward.
	recheckBy time.Time
}

// newID gives the acquisition a new permit id and secret, with which nothing
// was done in Redis yet.
func (a *acquisition) newID() {
	a.id, a.secret, a.fresh = a.s.c.NewID(), newSecret(), true
	a.queuedAt = core.Ticket{}
}

// entry is the acquisition's queue entry (see sem_lib.lua); "" for Drain,
// which never queues.
func (a *acquisition) entry() string {
	if a.n == 0 {
		return ""
	}
	return a.s.entry(a.id, a.want, a.lease, a.secret)
}

// try makes one attempt; with w set it waits in the queue (and w is tagged
// with the id, so that a release can hand it the permits by name). Permits
// handed over since the last attempt are taken without asking Redis.
func (a *acquisition) try(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	s := a.s
	if w != nil {
		a.wokeAt = time.Now()
		w.SetTagKeeping(a.id, a.keepData()) // a new id discards grants to the old one
		data := w.TakeData()
		if a.handedOff(data) {
			return true, 0, nil
		}
		a.traced = true
		if d, ok := core.ParseNotice(data, rlock.MaxClaimWindow); ok && !a.recheckBy.IsZero() {
			// Permits were just handed to waiters ahead for a claim window:
			// re-check when it lapses (a drift margin later), in case one of
			// them never takes them up.
			if retry := min(d+core.DriftMargin(d), time.Until(a.recheckBy)); retry > 0 {
				a.recheckBy = time.Now().Add(retry)
				return false, retry, nil
			}
		}
	}
	a.recheckBy = time.Time{}
	t := s.c.NewTicket()
	fresh := a.fresh
	a.fresh = false
	r, err := s.acquireScript(ctx, acquireArgs{id: a.id, want: a.want, secret: a.secret, lease: a.lease, enqueue: w != nil, fresh: fresh})
	if err != nil {
		// A Redis error reply means the script did not complete; any other
		// error leaves its outcome unknown: the retry, under the same id,
		// finds it out (sem_acquire.lua is idempotent per id).
		a.traced = true
		// Unless it says nothing of Redis (the wait ending mid-call, another
		// caller's deadline closing the connection): then what the attempts
		// before it learned stands.
		if !core.SaysNothing(ctx, err) {
			a.lastErr = err
		}
		if _, isRedis := rueidis.IsRedisErr(err); !isRedis {
			// Only a round trip confirms a grant until a request is answered.
			a.queuedAt = core.Ticket{}
		}
		return false, 0, err
	}
	a.lastErr = nil
	switch r.status {
	case 1:
		if s.c.Unacked(r.acked) {
			return a.unacked(ctx, w, r.acked)
		}
		// The script set the lease from when it ran, after t (an earlier
		// request running late only sets it again, later).
		a.ticket, a.got = t, r.value
		return true, 0, nil
	case 0:
		a.contended = true
		if w != nil {
			a.queuedAt, a.queuedArrival = t, r.arrival
		}
		// Re-check by the earliest expiry, and at least as often as the
		// script was told (see recheckCap), which keeps our place in the
		// queue.
		retry := recheckCap(s.c)
		if r.value >= 0 {
			retry = min(retry, time.Duration(r.value+1)*time.Millisecond)
		}
		if w != nil {
			a.recheckBy = time.Now().Add(retry)
		}
		return false, retry, nil
	case -2:
		// Our id was given up in Redis: carry on under a new one.
		a.newID()
		a.traced = w != nil
		return false, 0, nil
	case -3:
		return false, 0, fmt.Errorf("%w: %q: asked for %s, limit is %d", ErrExceedsLimit, s.name, a.want, r.value)
	case -5:
		return false, 0, fmt.Errorf("%w: %q is a semaphore with limit %d, not a lock", ErrExceedsLimit, s.name, r.value)
	default:
		return false, 0, fmt.Errorf("%w: %q", ErrNoLimit, s.name)
	}
}

// handedOff reports whether a release handed the permits to this id: a
// message proven with our secret (data, taken from the waiter) woke it. The
// grant runs for the claim window (or the lease, when shorter; see
// rlock.WithClaimWindow) from a moment after queuedAt, which then dates the
// hold; when that leaves less than half the window, the caller confirms with
// a round trip instead (sem_acquire.lua finds the permits and sets their
// whole lease), so a hold never starts nearly expired. A WithLease
// acquisition confirms a grant shorter than its lease the same way: the
// watchdog, which extends claims, does not renew it. A message that proves
// nothing (forged, garbled, for an id we no longer use) is ignored: the
// caller re-checks with Redis. So is a grant to another place than the one
// the last attempt reported: one the waiter let lapse, read late or replayed
// by someone after it queued again under the same secret.
func (a *acquisition) handedOff(data string) bool {
	g, ok := parseGrant(data, a.secret)
	claim := a.claim()
	if !ok || g.n != a.n || a.queuedAt.At().IsZero() || g.arrival != a.queuedArrival || time.Since(a.queuedAt.At()) > claim/2 ||
		(claim < a.lease && !a.renew) {
		return false
	}
	if a.s.c.Acking() {
		// The hand-off was written by the releaser's connection: confirm it
		// with a round trip (sem_acquire.lua re-sets the lease of the
		// permits it finds) followed by WAIT on ours, which covers it too.
		return false
	}
	a.got, a.ticket = g.n, a.queuedAt
	a.claimed = claim < a.lease
	return true
}

// keepData is the rule by which w keeps a message to this id until try takes
// it (see core.KeepData): a later message, which anyone may publish, never
// displaces a grant proven with our secret, nor does a notice displace a wake
// that re-checks sooner.
func (a *acquisition) keepData() func(held, next string) bool {
	secret := a.secret
	return core.KeepData(func(data string) (uint64, bool) {
		g, ok := parseGrant(data, secret)
		return g.arrival, ok
	}, rlock.MaxClaimWindow)
}

// claim is how long a hand-off to this id grants the permits for.
func (a *acquisition) claim() time.Duration { return min(a.lease, a.s.c.Cfg.ClaimWindow) }

// giveUp ends a failed acquisition: its id leaves the queue and gives back
// anything a request whose reply was lost may have taken, before the call
// returns (see Semaphore.abandon). It is the only clean-up of an acquisition.
func (a *acquisition) giveUp(ctx context.Context) {
	if a.traced {
		a.traced = false
		a.s.abandon(ctx, a.id, a.entry(), a.lease)
	}
}

// waitTry is try for a wait: an attempt that finds the permits taken makes
// the call a waiter (see core.Client.BeginWait).
func (a *acquisition) waitTry(ctx context.Context, w *mux.Waiter) (bool, time.Duration, error) {
	ok, retry, err := a.try(ctx, w)
	if !ok && err == nil {
		a.s.c.BeginWait(&a.call)
	}
	return ok, retry, err
}

// hold turns a successful acquisition into a permit context; if ctx ended in
// the meantime the permits are given back.
func (a *acquisition) hold(ctx context.Context) (context.Context, error) {
	s := a.s
	if c := &a.call; c.Waited {
		c.Via, c.HandOff = core.ViaHandOff, time.Since(a.wokeAt)
	}
	permitCtx, cancel := core.LockContext(ctx)
	h := s.c.NewHold(permitKind, s.name, s.keys.permits, a.id, 0, a.lease, a.renew, cancel)
	h.Ctx = permitCtx
	s.giveBackOnLapse(h)
	if err := ctx.Err(); err != nil || !s.c.Register(h) {
		h.End(ErrReleased)
		a.traced = true
		a.giveUp(ctx)
		if err == nil {
			err = ErrClosed
		}
		return nil, s.wrap("acquire", err)
	}
	if a.claimed {
		h.StartClaimed(a.ticket, a.claim())
	} else {
		h.Start(a.ticket)
	}
	if a.lw != nil {
		s.turns.form(s.name, h, a.lw, a.contended)
		h.OnEnd(func() { s.turns.dissolve(s.name, h) })
	}
	return s.withPermit(permitCtx, h, a.got), nil
}

// withPermit makes the permit context returned to the caller: permitCtx (see
// core.LockContext) carrying n permits of h, which are released if the
// program drops that context without Release (see core.WatchDrop).
func (s *Semaphore) withPermit(permitCtx context.Context, h *core.Hold, n int64) context.Context {
	p := &permit{hold: h, n: n}
	core.WatchDrop(s.c, p, &core.Dropped{What: "semaphore", Name: s.name, Owner: h.Owner,
		Release: func() (bool, error) { return s.releaseDropped(h, n) }, Hold: h})
	return context.WithValue(permitCtx, permitKey{s.c, s.name}, p)
}

// releaseDropped releases the n permits of h, whose permit context the
// program dropped. It reports whether they were still held.
func (s *Semaphore) releaseDropped(h *core.Hold, n int64) (bool, error) {
	err := s.release(context.Background(), &permit{hold: h, n: n}, s.c.NewID(), false, false)
	if errors.Is(err, ErrNotHeld) {
		return false, nil // ended meanwhile: a Release in flight, a loss
	}
	return err == nil, err
}

// waitLocal waits among the Client's waiters until it is passed a lease
// (done, with the permit context), made the leader (not done), or the wait is
// over (done, with the error).
func (a *acquisition) waitLocal(ctx context.Context, lw *localWaiter) (permitCtx context.Context, done bool, err error) {
	s := a.s
	waitCtx := ctx
	if a.cfg.waitSet {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(ctx, a.cfg.waitTimeout,
			fmt.Errorf("%w: %q after waiting %v: %w", ErrNoPermits, s.name, a.cfg.waitTimeout, context.DeadlineExceeded))
		defer cancel()
	}
	select {
	case <-lw.ready:
	case <-waitCtx.Done():
		err := core.CtxError(waitCtx)
		if errors.Is(err, ErrNoPermits) {
			return nil, true, err
		}
		return nil, true, s.wrap("acquire", err)
	}
	if p := s.turns.take(lw); p != nil {
		a.call.Via, a.call.HandOff = core.ViaLocal, time.Since(p.at)
		permitCtx, err := s.holdPassed(ctx, p)
		return permitCtx, true, err
	}
	return nil, false, nil
}

// Release gives back the permits carried by permitCtx and, in the same step,
// hands them to the waiters at the head of the queue that they are enough for
// (see the package documentation); permitCtx is then cancelled with cause
// ErrReleased. On a semaphore with turns, a one-permit lease goes instead to
// the next waiting goroutine of this Client while the turn lasts, or is kept
// for this Client's next Acquire for up to the linger, with no round trip
// (see Turns in the package documentation).
//
// Release works even when permitCtx is cancelled, and retries connection errors
// with an idempotent request. It fails with ErrNotHeld, changing nothing, when
// permitCtx holds no permit of the semaphore or its lease already expired (then
// the error also matches ErrLeaseLost).
//
// When the release itself fails (Redis unreachable for longer than the
// Client's unlock timeout, or the command refused), the permits are given up:
// they are no longer renewed, permitCtx is cancelled with a cause matching
// ErrLeaseLost and ErrAbandoned, a clean-up is retried in the background, and
// the error, an *AbandonError matching ErrAbandoned, tells by when Redis frees
// the permits at the latest.
func (s *Semaphore) Release(permitCtx context.Context) error {
	if s.err != nil {
		return s.err
	}
	if s.c == nil || s.c.Obs == nil {
		return s.releasePermits(permitCtx)
	}
	start := time.Now()
	err := s.releasePermits(permitCtx)
	s.c.Released(permitCtx, permitKind, "Release", s.name, start, err == nil, err)
	return err
}

func (s *Semaphore) releasePermits(permitCtx context.Context) error {
	p := s.permitOf(permitCtx)
	if p == nil {
		return fmt.Errorf("%w: the context holds no permit of %q: pass the permit context that Acquire returned (or one derived from it), not the context given to Acquire",
			ErrNotHeld, s.name)
	}
	return s.release(permitCtx, p, s.c.NewID(), false, true)
}

// release runs the release under requestID; retried tells that a request of
// that id may have run already (only tests replay one). A one-permit lease
// goes to the next waiter of this Client instead while its turn lasts, or,
// with mayPark, is kept for this Client's next Acquire (see turns.go).
func (s *Semaphore) release(permitCtx context.Context, p *permit, requestID string, retried, mayPark bool) error {
	h := p.hold
	h.Serial.Lock() // one release of h at a time: a pass hands its id on
	defer h.Serial.Unlock()
	if ended, cause := h.State(); ended {
		return s.notHeld(cause)
	}
	if s.turns != nil && p.n == 1 {
		if s.turns.passOn(s.name, h) || mayPark && s.turns.park(s, h) {
			h.End(ErrReleased) // the next holder took over the lease
			return nil
		}
		// The turn ends: the oldest waiter queues in Redis, behind the
		// other Clients' waiters that this release serves first.
		s.turns.dissolve(s.name, h)
	}
	h.BeginRelease()
	defer h.EndRelease()
	// The release sets no lease, so it needs no ticket.
	ctx, cancel := s.c.UnlockContext(permitCtx)
	defer cancel()
	var released int64
	err := core.RetryTransient(ctx, func() (err error) {
		released, err = s.releaseScript(ctx, h.Owner, requestID, retried)
		retried = true // from now on an earlier attempt may have run
		return err
	})
	switch {
	case err != nil:
		id := h.Owner
		ae := h.Abandon("release", err, func(ctx context.Context) error { return s.abandonScript(ctx, id, "") })
		return s.wrap("release", ae)
	case released < 0:
		h.End(ErrLeaseLost)
		return s.notHeld(ErrLeaseLost)
	}
	h.End(ErrReleased)
	return nil
}

// Permits returns how many permits permitCtx holds of the semaphore: 0 when it
// holds none, or they were released or lost.
func (s *Semaphore) Permits(permitCtx context.Context) int64 {
	if p := s.permitOf(permitCtx); p != nil {
		if ended, _ := p.hold.State(); !ended {
			return p.n
		}
	}
	return 0
}

func (s *Semaphore) permitOf(ctx context.Context) *permit {
	if ctx == nil || s.c == nil {
		return nil
	}
	p, _ := ctx.Value(permitKey{s.c, s.name}).(*permit)
	return p
}

func (s *Semaphore) notHeld(cause error) error {
	if cause == nil || errors.Is(cause, ErrReleased) {
		return fmt.Errorf("%w: %q was already released by this context", ErrNotHeld, s.name)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotHeld, s.name, core.Inner(cause))
}
