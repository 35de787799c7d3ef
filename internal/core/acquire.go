package core

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/mux"
)

// An acquisition is one Lock, RLock or Acquire call of any kind, from its
// first attempt to its hold or its failure. Run drives it through these
// states, each a method of Acquisition that returns the next:
//
//	kept      (kinds with turns) the lock this Client kept after its last
//	          release -> held, no script; else -> attempt
//	attempt   one acquire script that takes the lock if it is free, without
//	          queueing. Skipped, to local, when this Client's calls are known
//	          to hold or wait for the lock (LocalTurns.Active, or the grant
//	          channel's subscription is live, unless Spec.AttemptFirst):
//	          the queued state's first script then acquires or queues,
//	          with no grant to miss.
//	            acquired -> held
//	            taken -> failed (a Try call), local (a blocking one)
//	            Redis unreachable -> failed, or local (a blocking call)
//	            no answer (another caller's deadline closed the
//	            connection) -> local, the wait timeout not yet started
//	local     (kinds with turns; once) waits among this Client's calls for
//	          the same lock (see LocalTurns.WaitLocal)
//	            passed the lock -> held
//	            given a place a release queued for it -> queued (presumed)
//	            made the leader -> attempt, if no attempt was made and the
//	            channel is not live; else queued
//	            wait over -> failed
//	          (no turns -> queued)
//	queued    subscribed to the grant channel and queued in Redis under one
//	          owner id, re-checking on every wake-up, when the holder's lease
//	          ends, and at least every Spec.RecheckCap to keep its place
//	            a script says acquired, a grant message proven for the place
//	            (Protocol.Parse), or a pass (LocalTurns.TakePass) -> held
//	            wait over (ctx, wait timeout, Close) -> failed
//	held      Protocol.Hold registers the hold and makes the lock context
//	failed    the owner id is given up where an attempt may have left it in
//	          Redis; the error says why (see failure)
//
// A kind supplies its scripts and its grant check (Protocol), and, if it has
// turns, its local waits (LocalTurns, over core.Turns); the states are the same for every kind.
type state uint8

const (
	stateKept state = iota
	stateAttempt
	stateLocal
	stateQueued
	stateHeld
	stateFailed
)

// Status is what an acquire script found.
type Status uint8

const (
	// Taken: another owner holds the lock (this owner is queued if asked).
	Taken Status = iota
	// Acquired: the owner holds the lock.
	Acquired
	// OwnerGone: the owner id was given up in Redis; never use it again.
	OwnerGone
	// Answered: Redis answered, and the kind turns the answer into a final
	// error (a limit exceeded, say); the attempt changed nothing.
	Answered
)

// Reply is one attempt's outcome, or a grant's (see Protocol.Parse).
type Reply struct {
	Status Status
	Retry  time.Duration // Taken: re-check by then at the latest
	Place  uint64        // Taken and queued: the place a grant to it names
	Token  uint64        // fencing token, when the kind has one
	Last   uint64        // last token of a range granted (the Mutex's cohort)
	Count  int64         // hold count
	Left   int64         // queued waiters left behind the grant (from a grant message: counted up to 2)
	Got    int64         // permits taken
	Acked  int64         // replicas that acknowledged (WithReplicaAck); -1: none asked
}

// Protocol is what a lock kind supplies to the engine.
type Protocol interface {
	// Attempt runs the kind's acquire script once for a.Owner; with enqueue
	// the script queues the owner when the lock is taken. fresh: no request
	// was sent under a.Owner before. An error with Status Acquired means
	// the script ran and something after it (WAIT) failed.
	Attempt(ctx context.Context, a *Acquisition, enqueue, fresh bool) (Reply, error)
	// Parse verifies data, a message addressed to a waiter: a grant proven
	// with secret, to the place place. order ranks proven grants (a later
	// grant's is higher). It runs on the pub/sub reading goroutine too, so
	// it may read only what does not change during the call.
	Parse(data, secret string, place uint64) (r Reply, order uint64, ok bool)
	// AbandonNow gives up owner in Redis, leaving a tombstone against its
	// late attempts, and reports whether it did.
	AbandonNow(ctx context.Context, owner, secret string) error
	// GiveUp gives up owner in Redis (its place, anything a lost reply
	// took), now or in the background.
	GiveUp(ctx context.Context, owner, secret string, tombstone bool)
	// Hold registers the hold of a successful acquisition and returns the
	// lock context; when ctx ended meanwhile it gives the lock back.
	Hold(ctx context.Context, a *Acquisition) (context.Context, error)
	// Taken is the error of a call that made one attempt and found the lock
	// taken; retry is when it is free again at the latest.
	Taken(retry time.Duration) error
	// Fail adds what the kind knows to the error of a failed call.
	Fail(err error) error
}

// LocalTurns is what a kind with turns supplies: the waits of its Client's calls
// for the same lock among themselves (see rlock's cohorts and the
// semaphore's turns).
type LocalTurns interface {
	// Kept takes the lock this Client kept after its last release.
	Kept(a *Acquisition) bool
	// Active tells that this Client's calls hold or wait for the lock.
	Active() bool
	// WaitLocal waits among the Client's calls; see LocalOutcome.
	WaitLocal(ctx context.Context, a *Acquisition) (LocalOutcome, error)
	// TakePass takes a pass from this Client's holder that came while the
	// call waited in Redis.
	TakePass(a *Acquisition, w *mux.Waiter) bool
	// Listen keeps w, the call's subscription, once it holds the lock.
	Listen(a *Acquisition, w *mux.Waiter)
	// Reached tells the Client's other calls whether an attempt of this one,
	// their leader, reached Redis (see Turns.NoteReached).
	Reached(a *Acquisition, reached bool)
	// Leave ends the call's part in its Client's waits.
	Leave(a *Acquisition)
}

// LocalOutcome is how a local wait ended.
type LocalOutcome uint8

const (
	LocalLeader LocalOutcome = iota // queue in Redis for the Client
	LocalPassed                     // passed the lock: held
	LocalQueued                     // given a place (see Acquisition.Promote)
	LocalOver                       // the wait is over: failed
)

// Spec is what a call tells the engine besides its Protocol.
type Spec struct {
	Channel    string        // the grant channel a queued waiter listens on
	Weight     int64         // its weight there (permits asked for)
	Tag        string        // its tag there; "": the owner id
	RecheckCap time.Duration // re-check a place in the queue at least this often
	MaxClaim   time.Duration // longest claim window a notice may name
	// AttemptFirst: the first attempt is never skipped for a live grant
	// channel, which may only linger from an earlier wait (an RWMutex
	// writer: once queued, it shuts every new reader out).
	AttemptFirst bool
	Busy         error  // ErrLocked, ErrNoPermits: what a taken lock is
	Pkg, Op      string // "rlock", "lock": how errors name the call
	Name         string
}

// Acquisition is one call's state, kept across its attempts under one owner
// id (a retry after a lost reply finds what the lost request did).
type Acquisition struct {
	C     *Client
	Proto Protocol
	Local LocalTurns // nil: the call takes no part in turns
	Spec  Spec

	Wait        bool // block until acquired (Lock) or one attempt (TryLock)
	WaitTimeout time.Duration
	WaitSet     bool

	Owner  string
	Secret string // proves grant messages to this owner
	Lease  time.Duration
	Renew  bool

	// The result, for Protocol.Hold.
	Ticket  Ticket // dates the command that granted the lease
	Reply   Reply
	Claimed bool // granted for the claim window only: the hold awaits its extension
	Passed  bool // passed the lock by this Client (see LocalTurns)
	// Uncertain: an attempt's reply was lost; it may still run late, so the
	// owner id is given up under a tombstone.
	Uncertain bool
	// Contended: Redis said another owner holds the lock.
	Contended bool
	Call      Call // what Stats and the Observer learn of the call

	ctx     context.Context
	waitCtx context.Context // ctx bounded by the wait timeout once it runs
	cancel  context.CancelFunc
	w       *mux.Waiter // the call's subscription, once it has one
	err     error

	attempted bool   // the first attempt was made
	joined    bool   // the local state was entered
	sent      bool   // a request was sent under Owner
	inRedis   bool   // an attempt may have queued Owner (or more)
	queuedAt  Ticket // dates the last attempt that queued Owner
	// place is what that attempt reported: only a grant naming it was made
	// after it (read by Parse on the pub/sub goroutine, hence atomic).
	place     atomic.Uint64
	keep      func(held, next string) bool
	lastErr   error     // the last attempt failed to reach Redis (or Redis refused)
	recheckBy time.Time // the latest re-check the last attempt planned
	presumed  bool      // a release queued Owner (Promote): first just wait
	presumeIn time.Duration
	wokeAt    time.Time
}

// NewOwner gives the call a fresh owner id and secret, with which nothing
// was done in Redis yet.
func (a *Acquisition) NewOwner() {
	a.Owner, a.Secret, a.sent, a.inRedis = a.C.NewID(), NewSecret(), false, false
	a.queuedAt = Ticket{}
	a.place.Store(0)
	a.keep = nil
}

// Run drives the call through the states above to its lock context or its
// error.
func (a *Acquisition) Run(ctx context.Context) (context.Context, error) {
	a.ctx, a.waitCtx = ctx, ctx
	defer a.end()
	s := stateAttempt
	if a.Local != nil {
		s = stateKept
	}
	for {
		switch s {
		case stateKept:
			s = a.kept()
		case stateAttempt:
			s = a.attempt()
		case stateLocal:
			s = a.local()
		case stateQueued:
			s = a.queued()
		case stateHeld:
			a.noteVia()
			return a.Proto.Hold(ctx, a)
		default:
			return nil, a.err
		}
	}
}

func (a *Acquisition) kept() state {
	if a.Local.Kept(a) {
		a.Call.Via, a.Passed = ViaKept, true
		return stateHeld
	}
	return stateAttempt
}

// attempt is the first attempt, unless the lock is known to be contended.
func (a *Acquisition) attempt() state {
	if a.Wait {
		if a.Local != nil && !a.joined && a.Local.Active() {
			return stateLocal
		}
		if a.w == nil && !a.Spec.AttemptFirst {
			a.w = a.C.Mux.SubscribeIfLive(a.Spec.Channel, a.Spec.Weight)
		}
		if a.w != nil {
			return stateLocal
		}
	}
	a.attempted = true
	ok, retry, err := a.try(a.ctx, nil)
	switch {
	case err != nil && a.Wait && SaysNothing(a.ctx, err) && a.ctx.Err() == nil:
		// No answer at all: another caller's deadline closed the
		// connection. The wait timeout starts once Redis has answered
		// (see queued), as it would have without this attempt.
		return stateLocal
	case err != nil && a.Wait && (Retryable(a.ctx, err) || a.C.Cfg.ReplicaAckRetry && isNotReplicated(err)):
		// A dropped connection is no reason to give up a blocking call:
		// the wait retries with backoff while ctx lasts.
	case err != nil:
		return a.fail(err)
	case ok:
		return stateHeld
	case !a.Wait:
		a.err = a.Proto.Fail(a.Proto.Taken(retry))
		return stateFailed
	}
	a.StartWait() // an attempt came first: the wait timeout runs from now
	return stateLocal
}

// local waits among this Client's calls for the lock, once.
func (a *Acquisition) local() state {
	if a.Local == nil || a.joined {
		return stateQueued
	}
	a.joined = true
	out, err := a.Local.WaitLocal(a.ctx, a)
	switch out {
	case LocalPassed:
		a.Passed = true
		a.GiveUpOwner() // its place in the Redis queue is of no use now
		return stateHeld
	case LocalOver:
		a.GiveUpOwner()
		return a.fail(err)
	case LocalLeader:
		if !a.attempted && a.w == nil {
			return stateAttempt // the leader's first attempt, as any call's
		}
	}
	return stateQueued
}

// queued waits in the Redis queue until acquired or the wait is over.
func (a *Acquisition) queued() state {
	var timeout time.Duration
	if a.cancel == nil && a.WaitSet {
		// No attempt preceded the wait: its timeout starts once the wait's
		// first attempt has returned, so however short it is, Redis has its
		// say (the lock is taken, or Redis cannot be reached) first.
		timeout = a.WaitTimeout
	}
	cause := &WaitTimeoutError{D: a.WaitTimeout}
	var err error
	if a.w != nil {
		w := a.w
		a.w = nil // WaitWithin leaves it
		err = a.C.WaitWithin(a.waitCtx, timeout, cause, w, a.waitTry)
	} else {
		err = a.C.WaitForWithin(a.waitCtx, timeout, cause, a.Spec.Channel, a.Spec.Weight, a.waitTry)
	}
	if err != nil {
		return a.fail(err)
	}
	return stateHeld
}

// fail ends the call with the error err explains (see failure), giving up
// the owner id where an attempt may have left it in Redis.
func (a *Acquisition) fail(err error) state {
	if a.inRedis || a.Uncertain {
		a.Proto.GiveUp(a.ctx, a.Owner, a.Secret, true)
		a.inRedis, a.Uncertain = false, false
	}
	a.err = a.Proto.Fail(a.failure(err))
	return stateFailed
}

// GiveUpOwner abandons the owner id of the call's attempts so far when one
// of them may have left it in Redis: queued or, its reply lost, holding the
// lock. The call is about to hold under another owner id (a pass, a place
// its Client's release queued) or to fail.
func (a *Acquisition) GiveUpOwner() {
	if a.inRedis || a.Uncertain {
		a.Proto.GiveUp(a.ctx, a.Owner, a.Secret, a.Uncertain)
		a.inRedis, a.Uncertain = false, false
	}
}

// end is what the call leaves when it returns.
func (a *Acquisition) end() {
	a.C.EndWait(&a.Call)
	if a.Local != nil {
		a.Local.Leave(a)
	}
	if a.w != nil {
		a.w.Leave(true)
	}
	if a.cancel != nil {
		a.cancel()
	}
}

// StartWait starts the wait timeout, if the call has one and it has not
// started: the wait begins (a local one, or after the first attempt).
func (a *Acquisition) StartWait() {
	if a.WaitSet && a.cancel == nil {
		a.waitCtx, a.cancel = context.WithTimeoutCause(a.ctx, a.WaitTimeout, &WaitTimeoutError{D: a.WaitTimeout})
	}
}

// WaitCtx is the context that bounds the call's wait.
func (a *Acquisition) WaitCtx() context.Context { return a.waitCtx }

// Promote makes the call the owner of the place p in the Redis queue that a
// release of its Client queued for it (see Turns.Succeed): unless p.Check,
// its first attempt only waits, for p.RetryIn at most.
func (a *Acquisition) Promote(p *Promotion) {
	a.GiveUpOwner()
	if a.w != nil {
		a.w.Leave(true) // the place comes with its own subscription
	}
	a.Owner, a.Secret, a.sent, a.inRedis, a.keep = p.Owner, p.Secret, true, true, nil
	a.queuedAt = p.QueuedAt
	a.place.Store(p.Fence)
	a.presumed, a.presumeIn = !p.Check, p.RetryIn
	a.w = p.W
}

func (a *Acquisition) noteVia() {
	switch c := &a.Call; {
	case c.Via == ViaKept, c.Via == ViaLocal:
	case c.Waited && !a.wokeAt.IsZero():
		c.Via, c.HandOff = ViaHandOff, time.Since(a.wokeAt)
	case c.Waited:
		c.Via = ViaHandOff
	}
}

// isRedisAnswer tells an error that Redis sent, the script refused before it
// changed anything.
func isRedisAnswer(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
