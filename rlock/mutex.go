package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
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
// The lock context keeps the values of Lock's ctx but not its cancellation:
// it is cancelled exactly when the hold ends, with cause ErrUnlocked after
// the final Unlock and ErrLeaseLost when the lease was lost (see Lock context
// in the package documentation). A lease is not a correctness guarantee (a
// paused process can outlive it); protect shared state with the fencing token
// (Token) where it matters.
type Mutex struct {
	c    *core.Client
	t    *core.Turns
	name string
	fair bool  // strict FIFO (see Client.FairMutex): no cohort, no turns
	err  error // invalid name, reported by every method
	keys keys
}

// Name returns the name the Mutex was created with.
func (m *Mutex) Name() string { return m.name }

// Lock blocks until it holds the lock, ctx is done, or the wait timeout of
// WithWaitTimeout runs out. It waits without polling, in a queue served in
// arrival order across processes (in turns per Client, see the package
// documentation; strictly per Lock call for a FairMutex): it sleeps until a release hands it the lock, a pub/sub
// reconnect, or the holder's lease runs out.
//
// Connection errors (a dropped or stalled connection, a restarting Redis) are
// retried with backoff until ctx ends, so bound ctx (or use WithWaitTimeout)
// when an unreachable Redis must not block the caller; other Redis errors are
// returned at once.
//
// ctx bounds the wait only. On success Lock returns the lock context, which
// carries the hold: pass it, not ctx, to Unlock (defer m.Unlock(lockCtx)), and
// do the guarded work with it. It keeps ctx's values but not ctx's
// cancellation or deadline, and is cancelled exactly when this hold ends:
// by the final Unlock (cause ErrUnlocked) or when the lease is lost
// (ErrLeaseLost). So cancelling ctx later (a shutdown) leaves the lock held
// and lockCtx live, for the critical section to finish and Unlock; a hold
// whose lock context the program drops without Unlock is released once the
// context is garbage (see Lock context in the package documentation). Without
// WithLease the watchdog renews the lease until Unlock. On failure nothing is
// held and nothing is left behind in Redis; the error matches ctx's error when
// ctx ended (and ErrLocked too when ctx's deadline ended a wait behind another
// owner), ErrLocked (and context.DeadlineExceeded) when the wait timeout ran
// out, and ErrUnavailable (wrapping the last connection error) when the wait
// ended while Redis could not be reached.
//
// If ctx already holds the lock, Lock re-enters at once and returns ctx. A
// ctx that does not carry the hold (the context given to the first Lock,
// rather than the lock context it returned) is another owner and waits like
// one, for the whole of its deadline when the hold lasts; an ErrLocked error
// then also says that this Client holds the lock through another lock
// context.
func (m *Mutex) Lock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return m.observedLock(ctx, "Lock", true, opts)
}

// TryLock makes one attempt. It returns the lock context as Lock does, or an
// error matching ErrLocked if another owner holds the lock, or ErrUnavailable
// (wrapping the connection error) if Redis could not be reached. A context
// that already holds the lock re-enters.
func (m *Mutex) TryLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return m.observedLock(ctx, "TryLock", false, opts)
}

// observedLock is lock, counted in the Client's Stats and told to its
// Observer.
func (m *Mutex) observedLock(ctx context.Context, op string, wait bool, opts []LockOption) (context.Context, error) {
	if m.c == nil {
		return m.lock(ctx, wait, opts, &core.Call{}) // fails: see usable
	}
	call := core.Call{Start: time.Now()}
	lockCtx, err := m.lock(ctx, wait, opts, &call)
	m.c.Acquired(ctx, mutexKind, op, m.name, &call, err, ErrLocked)
	return lockCtx, err
}

// Token returns the fencing token of the hold carried by lockCtx: a number
// from the lock's counter in Redis that stays the same across re-entries.
// Every acquisition granted by Redis gets a token above all issued before
// it; a pass between goroutines of one Client takes the next token of a block
// Redis reserved for that Client, so a pass made before the Client hears of a
// loss in Redis (ForceUnlock, a restart) may carry a token below the new
// holder's (see docs/guarantees.md). A resource that remembers the
// highest token it has seen and rejects lower ones is safe even then, and
// against a holder that outlived its lease. It fails with ErrNotHeld when lockCtx holds
// no hold of the lock (a hold that ended still reports its token).
//
// Tokens are not consecutive. Redis issues them from its clock in
// microseconds, or above the lock's counter when that is ahead of the clock,
// so that a Redis restarted without persistence, which loses the counter,
// still issues tokens above those issued before (as long as its clock did not
// go back); and a holder reserves a few at a time to pass the lock to
// goroutines of its own Client. The counter expires when the lock is idle
// (one lease after its last token, and never before the clock has passed its
// value), and the next acquisition's token, from the clock, is above every
// token before (see "What stays in Redis" in the package documentation).
func (m *Mutex) Token(lockCtx context.Context) (uint64, error) {
	if m.err != nil {
		return 0, m.err
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return 0, m.noHold(lockCtx)
	}
	return h.Token(), nil
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
	ctx, cancel := m.c.UnlockContext(lockCtx)
	defer cancel()
	n, err := m.c.RC.Do(ctx, m.c.RC.B().Hget().Key(m.keys.lock).Field(h.Owner()).Build()).AsInt64()
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
	var n int64
	err := m.c.Inspect(ctx, func(ctx context.Context) (err error) {
		n, err = m.c.RC.Do(ctx, m.c.RC.B().Exists().Key(m.keys.lock).Build()).AsInt64()
		return err
	})
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
	var pttl int64
	err := m.c.Inspect(ctx, func(ctx context.Context) (err error) {
		pttl, err = m.c.RC.Do(ctx, m.c.RC.B().Pttl().Key(m.keys.lock).Build()).AsInt64()
		return err
	})
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
// whether there was a lock to delete. Each former holder is sent a message on
// its Client's grant channel, so that its Client stops passing the lock to its
// own goroutines (and keeping it for them, see WithLinger); it learns of the loss at its next renewal (its lock context is
// then cancelled with ErrLeaseLost) or Unlock (ErrNotHeld). It is an
// administrative tool, not a way to share a lock.
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
	if m.c == nil {
		return errZero("Mutex", "Client.Mutex")
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

// noHold is the error of a call given a context that carries no hold of the
// lock: it says which context to pass, since the usual mistake is the context
// given to Lock (the etcd habit), and names the Client whose Mutex does hold
// the lock through ctx, if any.
func (m *Mutex) noHold(ctx context.Context) error {
	if other := otherClientHold(ctx, m.c, m.name); other != nil {
		return fmt.Errorf("%w: the context holds lock %q through another Client (%s), not this Mutex's (%s): use that Client's Mutex",
			ErrNotHeld, m.name, other.ID, m.c.ID)
	}
	return fmt.Errorf("%w: the context holds no lock %q: pass the lock context that Lock returned (or one derived from it), not the context given to Lock",
		ErrNotHeld, m.name)
}

// heldHere adds to err, an error matching ErrLocked, that this Client itself
// holds the lock, when it does: the context given to the call does not carry
// that hold (else the call would have re-entered it), and the usual cause is
// re-entering with the context given to Lock rather than the lock context it
// returned, a wait only the deadline ends. held tells whether the Client
// holds it; it is asked only of an ErrLocked.
func heldHere(err error, held func() bool) error {
	if !errors.Is(err, ErrLocked) || !held() {
		return err
	}
	return fmt.Errorf("%w; this Client holds the lock through another lock context, not the context given to this call: to re-enter, pass the lock context that Lock returned (or one derived from it)", err)
}

// heldHere is heldHere for a hold of m.
func (m *Mutex) heldHere(err error) error {
	return heldHere(err, func() bool { return m.c.Holding(mutexKind, m.keys.lock) })
}

// otherClientHold returns the Client of a hold of name that ctx carries
// through a Client other than c, or nil.
func otherClientHold(ctx context.Context, c *core.Client, name string) *core.Client {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(holdsKey{}).(*holdLink)
	for ; l != nil; l = l.outer {
		if l.c != c && l.name == name {
			return l.c
		}
	}
	return nil
}

func (m *Mutex) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrLocked) {
		return err
	}
	return core.Refused(fmt.Errorf("rlock: %s %q: %w", op, m.name, core.Inner(err)))
}

func (m *Mutex) notHeld(cause error) error {
	if cause == nil || errors.Is(cause, ErrUnlocked) {
		return fmt.Errorf("%w: %q was already unlocked by this context", ErrNotHeld, m.name)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotHeld, m.name, core.Inner(cause))
}

// String describes the Mutex for logs.
func (m *Mutex) String() string {
	return "rlock.Mutex(" + strconv.Quote(m.name) + ")"
}
