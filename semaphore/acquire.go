package semaphore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
	if s.c == nil {
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
	a, err := s.prepare(ctx, "all", 0, false, opts)
	if err != nil {
		return nil, 0, err
	}
	defer s.c.Exit()
	permitCtx, err := a.Run(ctx)
	return permitCtx, a.Reply.Got, err
}

// An Acquire call runs on the engine (see core.Acquisition for its states);
// the semaphore supplies sem_acquire.lua and its grants (Protocol: Attempt,
// Parse, AbandonNow, GiveUp, Hold) and, for a blocking Acquire of one permit
// with the watchdog's lease on a semaphore with turns, its turns (Turns: see
// turns.go), where every call joins its Client's waiters first:
//
//	kept      the lease this Client kept at its last Release -> held
//	local     the leader goes on to attempt; the others wait in the Client
//	          until passed a lease (-> held, no script) or made the leader
//	queued    under one permit id (and secret) for the whole call; a grant
//	          message proven with the secret for the place the last attempt
//	          reported -> held, no script; else woken, or at the earliest
//	          lease end, or every third of the watchdog timeout (to keep its
//	          place): re-check with sem_acquire.lua, which finds permits
//	          handed over meanwhile
func (s *Semaphore) acquire(ctx context.Context, n int64, wait bool, opts []AcquireOption, call *core.Call) (context.Context, error) {
	if n < 1 || n > MaxPermits {
		return nil, fmt.Errorf("%w: permits must be between 1 and %d, got %d", ErrInvalidCount, int64(MaxPermits), n)
	}
	a, err := s.prepare(ctx, strconv.FormatInt(n, 10), n, wait, opts)
	if err != nil {
		return nil, err
	}
	defer s.c.Exit()
	defer a.Call.CopyTo(call) // a pointer kept in a would cost an allocation
	if a.Wait && s.turns != nil && n == 1 && a.Renew {
		a.Local = a
	}
	return a.Run(ctx)
}

func (s *Semaphore) prepare(ctx context.Context, want string, n int64, wait bool, opts []AcquireOption) (*acquisition, error) {
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
	op := "acquire"
	if n == 0 {
		op = "drain"
	}
	a := &acquisition{s: s, want: want, n: n}
	a.C, a.Proto = s.c, a
	a.Spec = core.Spec{Channel: s.grant, Weight: n, RecheckCap: recheckCap(s.c), MaxClaim: rlock.MaxClaimWindow,
		Busy: ErrNoPermits, Pkg: "semaphore", Op: op, Name: s.name}
	a.Wait = wait && !cfg.tryOnce // WithWaitTimeout(0): one attempt, as TryAcquire
	a.WaitTimeout, a.WaitSet = cfg.waitTimeout, cfg.waitSet
	a.Lease, a.Renew = s.c.Cfg.WatchdogTimeout, true
	if cfg.leaseSet {
		a.Lease, a.Renew = cfg.lease, false
	}
	return a, nil // the permit id comes with the first attempt (see core.Acquisition.try)
}

// acquisition is one Acquire or Drain call, run by the engine with the
// semaphore's scripts, grants and turns. It keeps one permit id (and
// secret) throughout, so that a retry after a lost reply finds what the lost
// request did: the permits it took, or its place in the queue.
type acquisition struct {
	core.Acquisition
	s    *Semaphore
	want string // permits asked for, as sem_acquire.lua reads them
	n    int64  // permits asked for; 0 for Drain's "all"
	lw   *core.TurnWaiter
	pass *core.Pass // passed on by a hold of this Client (see turns.go)
}

// entry is the queue entry of id (see sem_lib.lua); "" for Drain, which never
// queues.
func (a *acquisition) entry(id, secret string) string {
	if a.n == 0 {
		return ""
	}
	return a.s.entry(id, a.want, a.Lease, secret)
}

// Attempt runs sem_acquire.lua once (see core.Protocol).
func (a *acquisition) Attempt(ctx context.Context, _ *core.Acquisition, enqueue, fresh bool) (core.Reply, error) {
	s := a.s
	r, err := s.acquireScript(ctx, acquireArgs{id: a.Owner, want: a.want, secret: a.Secret, lease: a.Lease, enqueue: enqueue, fresh: fresh})
	out := core.Reply{Got: r.value, Acked: r.acked}
	if err != nil {
		if r.status == 1 {
			out.Status = core.Acquired // the script ran; WAIT failed
		}
		return out, err
	}
	switch r.status {
	case 1:
		out.Status = core.Acquired
	case 0:
		// Re-check by the earliest expiry (the engine caps it, while
		// queued, to keep the place).
		out.Status, out.Place, out.Retry = core.Taken, r.arrival, recheckCap(s.c)
		if r.value >= 0 {
			out.Retry = min(out.Retry, time.Duration(r.value+1)*time.Millisecond)
		}
	case -2:
		out.Status = core.OwnerGone // our id was given up in Redis
	case -3:
		return core.Reply{Status: core.Answered}, fmt.Errorf("%w: %q: asked for %s, limit is %d", ErrExceedsLimit, s.name, a.want, r.value)
	case -5:
		return core.Reply{Status: core.Answered}, fmt.Errorf("%w: %q is a semaphore with limit %d, not a lock", ErrExceedsLimit, s.name, r.value)
	default:
		return core.Reply{Status: core.Answered}, fmt.Errorf("%w: %q", ErrNoLimit, s.name)
	}
	return out, nil
}

// Parse verifies a grant: proven with secret, of the permits asked for, to
// the place numbered place (a grant to an earlier place of the same id, one
// the waiter let lapse, read late or replayed after it queued again under
// the same secret, handed over permits that may be long gone).
func (a *acquisition) Parse(data, secret string, place uint64) (core.Reply, uint64, bool) {
	g, ok := parseGrant(data, secret)
	if !ok || g.n != a.n || g.arrival != place {
		return core.Reply{}, 0, false
	}
	return core.Reply{Status: core.Acquired, Got: g.n}, g.arrival, true
}

// AbandonNow gives id up at once, under a tombstone.
func (a *acquisition) AbandonNow(ctx context.Context, id, secret string) error {
	return a.s.abandonScript(ctx, id, a.entry(id, secret))
}

// GiveUp gives id up before the call returns, retried in the background
// while Redis cannot be reached (see Semaphore.abandon).
func (a *acquisition) GiveUp(ctx context.Context, id, secret string, _ bool) {
	a.s.abandon(ctx, id, a.entry(id, secret), a.Lease)
}

// Taken is the error of a TryAcquire or Drain that found no permits free.
func (a *acquisition) Taken(time.Duration) error {
	if a.n == 0 {
		return fmt.Errorf("%w: %q", ErrNoPermits, a.s.name)
	}
	return fmt.Errorf("%w: %q has fewer than %d free, or waiters ahead", ErrNoPermits, a.s.name, a.n)
}

// Fail returns err: the engine's error says all the semaphore knows.
func (a *acquisition) Fail(err error) error { return err }

// Hold turns a successful acquisition into a permit context; if ctx ended in
// the meantime the permits are given back.
func (a *acquisition) Hold(ctx context.Context, _ *core.Acquisition) (context.Context, error) {
	s := a.s
	if a.pass != nil {
		return s.holdPassed(ctx, a.pass)
	}
	permitCtx, cancel := core.LockContext(ctx)
	h := s.c.NewHold(s.holdSpec(a.Owner, a.Lease, a.Renew, permitCtx, cancel))
	if err := ctx.Err(); err != nil || !s.c.Register(h) {
		h.End(ErrReleased)
		s.abandon(ctx, a.Owner, a.entry(a.Owner, a.Secret), a.Lease)
		if err == nil {
			err = ErrClosed
		}
		return nil, s.wrap("acquire", err)
	}
	if a.Claimed {
		h.StartClaimed(a.Ticket, a.Claim())
	} else {
		h.Start(a.Ticket)
	}
	if a.lw != nil {
		s.turns.Form(s.name, h, core.NoTokens, a.lw, nil, a.Contended)
		h.OnEnd(func() { s.turns.Dissolve(s.name, h) })
	}
	return s.withPermit(permitCtx, h, a.Reply.Got), nil
}

// Kept takes the lease this Client kept at its last Release.
func (a *acquisition) Kept(*core.Acquisition) bool {
	a.pass = a.s.turns.Unpark(a.s.turn())
	return a.pass != nil
}

// Active is true: every call with turns joins its Client's waiters first.
func (a *acquisition) Active() bool { return true }

// WaitLocal waits among the Client's waiters until it is passed a lease,
// given a place in Redis, or made the leader.
func (a *acquisition) WaitLocal(context.Context, *core.Acquisition) (core.LocalOutcome, error) {
	s := a.s
	lw, lead := s.turns.Join(s.name)
	a.lw = lw
	if lead {
		return core.LocalLeader, nil
	}
	a.Contended = true
	s.c.BeginWait(&a.Call)
	a.StartWait()
	select {
	case <-lw.Ready():
	case <-a.WaitCtx().Done():
		// Behind a holder, or a leader whose answer is on its way: unless
		// the leader could not reach Redis (see Turns.Unreached).
		a.Contended = !s.turns.Unreached(s.name)
		return core.LocalOver, core.CtxError(a.WaitCtx())
	}
	if p := s.turns.Take(lw, nil); p != nil {
		a.pass = p
		a.Call.Via, a.Call.HandOff = core.ViaLocal, time.Since(p.At)
		return core.LocalPassed, nil
	}
	if p := s.turns.TakePromotion(lw); p != nil {
		// The release that ended our Client's turn queued us in Redis,
		// under a permit id of its own.
		a.Promote(p)
		return core.LocalQueued, nil
	}
	if s.c.IsClosed() {
		return core.LocalOver, ErrClosed
	}
	return core.LocalLeader, nil // acquire in Redis for the Client
}

// TakePass is false: only the leader waits in Redis, and no pass goes to it.
func (a *acquisition) TakePass(*core.Acquisition, *mux.Waiter) bool { return false }

// Listen does nothing: a semaphore's holder needs no listener.
func (a *acquisition) Listen(*core.Acquisition, *mux.Waiter) {}

// Reached tells this Client's other calls whether the attempt reached Redis.
func (a *acquisition) Reached(_ *core.Acquisition, ok bool) { a.s.turns.NoteReached(a.s.name, ok) }

// Leave ends the call's place among its Client's waiters; a lease passed to
// it as it left goes on, and a place queued for it is given up.
func (a *acquisition) Leave(*core.Acquisition) {
	if a.lw != nil {
		p, promo := a.s.turns.Leave(a.s.name, a.lw)
		if p != nil {
			a.s.handOn(p)
		}
		if promo != nil {
			promo.GiveUp(a.s.turn())
		}
	}
}

// withPermit makes the permit context returned to the caller: permitCtx (see
// core.LockContext) carrying n permits of h, which are released if the
// program drops that context without Release (see core.WatchDrop).
func (s *Semaphore) withPermit(permitCtx context.Context, h *core.Hold, n int64) context.Context {
	p := &permit{hold: h, n: n}
	core.WatchDrop(s.c, p, &core.Dropped{What: "semaphore", Name: s.name, Owner: h.Owner(),
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

// release runs the release under requestID (see core.Release); retried
// tells that a request of that id may have run already (only tests replay
// one). A one-permit lease goes to the next waiter of this Client instead
// while its turn lasts, or, with mayPark, is kept for this Client's next
// Acquire (see turns.go); mayPark is Release's own, which its caller waits
// for (see core.Release.Caller).
func (s *Semaphore) release(permitCtx context.Context, p *permit, requestID string, retried, mayPark bool) error {
	r := &semRelease{Release: core.Release{Hold: p.hold, Op: "release", Ended: ErrReleased, Caller: mayPark}, s: s, n: p.n,
		requestID: requestID, retried: retried, mayPark: mayPark}
	return r.Run(permitCtx, r)
}

// semRelease is one release of a semaphore's permits (see core.Releaser).
type semRelease struct {
	core.Release
	s                *Semaphore
	n                int64
	requestID        string
	retried, mayPark bool
	// local: the final release of a one-permit lease on a semaphore with
	// turns, which may pass it on or keep it in the Client, or name the
	// Client's next leader in Redis.
	local bool
}

// Pass passes a one-permit lease to the next waiter of this Client while its
// turn lasts, or keeps it for the Client's next Acquire.
func (r *semRelease) Pass(*core.Release) bool {
	s, h := r.s, r.Hold
	r.local = s.turns != nil && r.n == 1
	return r.local && (s.turns.PassOn(s.name, h) || r.mayPark && s.turns.Park(s.turn(), h))
}

// Round runs sem_release.lua. At most two rounds, as for the Mutex: one
// that may keep the permit for a local waiter (the successor), and, if that
// waiter cannot take it after all, one that lets it go.
func (r *semRelease) Round(ctx context.Context, _ *core.Release, t core.Ticket) (core.ReleaseReply, error) {
	s, h := r.s, r.Hold
	var next *core.Succession
	if r.local && r.Release.Round == 0 {
		next = s.turns.Succeed(s.turn(), h, true, s.grant, recheckCap(s.c), keepGrant)
	}
	var rr releaseReply
	err := core.RetryTransient(ctx, func() (err error) {
		rr, err = s.releaseScript(ctx, h.Owner(), r.requestID, r.retried, next, r.Lease)
		r.retried = true // from now on an earlier attempt may have run
		return err
	})
	if next != nil {
		next.Settle(core.SuccessionReply{Kept: rr.kept, Unqueued: rr.unqueued, Queued: rr.queued, Place: rr.arrival, Granted: rr.granted}, t, err)
	}
	switch {
	case err != nil:
		return core.ReleaseReply{}, err
	case rr.kept && next != nil:
		// No one else waits in Redis: the permit stayed ours for the next
		// local waiter. Pass it on; if that fails, let it go in a second
		// round, under a new request.
		if next.PassKept(t, r.Lease, h.Token()+1, core.NoTokens) {
			return core.ReleaseReply{}, nil
		}
		r.requestID, r.retried = s.c.NewID(), false
		return core.ReleaseReply{Again: true}, nil
	case rr.kept:
		return core.ReleaseReply{Err: fmt.Errorf("unexpected reply: permit kept without a successor")}, nil
	case rr.released < 0:
		return core.ReleaseReply{Left: -1}, nil
	case r.local:
		s.turns.NoteReleased(s.name) // see core.Turns' relock statistics
	}
	return core.ReleaseReply{}, nil
}

// Cleanup frees the permits whatever the release did.
func (r *semRelease) Cleanup(ctx context.Context, _ *core.Release) error {
	return r.s.abandonScript(ctx, r.Hold.Owner(), "")
}

func (r *semRelease) NotHeld(cause error) error { return r.s.notHeld(cause) }

func (r *semRelease) Wrap(err error) error { return r.s.wrap("release", err) }

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
