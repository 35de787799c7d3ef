package rlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
)

// MultiLock is a set of locks taken and released together, all or nothing
// (Redisson's RedissonMultiLock). Get one from Client.MultiLock. Each member
// is the Client's Mutex of that name (a FairMutex under WithFIFO), so a member
// excludes the Mutex of the same name, and the other way round.
//
// # Order and deadlock freedom
//
// The names are sorted (byte order) and deduplicated, and every MultiLock
// follows that one order, whatever order it was given the names in. Lock
// waits only in two ways: holding nothing, or, blocking on a member,
// holding members that come before it in the order only (a member lost
// while Lock waits, see below, is only tried while a later one is held).
// Along any chain of waiters (a MultiLock waits for a member whose holder
// waits for another lock) the locks waited for thus come later and later in
// the order, so the chain cannot close into a cycle: overlapping MultiLocks
// never deadlock one another, nor Mutexes that hold one lock at a time.
// (Locks the caller already holds when it calls Lock, re-entered as members,
// are outside this argument, as with any nested locking.)
//
// # Waiting without spinning
//
// Lock tries each member in order (TryLock). When one is taken, it releases
// the members it took and blocks on that one as a Mutex Lock does (a pub/sub
// wait in the lock's Redis queue, no polling). Holding it, it tries the
// members before it once each (blocking there could deadlock), then takes the
// members after it, blocking on each in turn (the order allows it). When one
// of the members before it is taken, it releases everything and blocks on
// that one, which comes earlier in the order than the one it blocked on
// before: a Lock starts over at most once per member, and only after a real
// wait, never in a loop of attempts. (Waiting in a lock's queue behind other
// waiters keeps the argument above: each of them, once it holds that lock,
// blocks only on later locks, or gives everything back.)
//
// A member may be lost while Lock waits for another: its WithLease lease
// runs out, or its hold is lost in Redis. Before it returns, Lock checks that
// every member is still held; it takes a lost one again as it would a member
// found taken (tried, and if taken, blocked on after releasing everything),
// so each extra round follows a loss and a real wait. A member lost with no
// wait since the last check (a lease too short to take the whole set) fails
// the call instead of trying again.
//
// # Atomicity across slots
//
// Each member is a separate lock with its own keys and hash tag, so the
// members may live in different Redis Cluster slots (or shards), and each is
// taken by its own script: no single script takes them all. All or nothing
// holds from the caller's view: Lock and TryLock return a lock context only
// when every member is held as they return (its hold not ended, its lease not
// run out), and on every failure they release the members taken in Redis
// before returning, each to the head of its Redis queue: never kept for the
// Client's next Lock (see WithLinger), nor passed to one of its goroutines
// ahead of that queue. (A release that cannot reach Redis gives the hold up:
// it expires with its lease.) Another client may see some members taken and
// others not for a moment, as with any sequence of locks.
//
// # Lock context and tokens
//
// The lock context carries every member's hold and keeps the values of Lock's
// ctx, not its cancellation (as Mutex's, see Lock context in the package
// documentation): it ends when the MultiLock is unlocked (cause ErrUnlocked)
// and as soon as any member's hold ends otherwise, with a cause that names the
// member and matches that member's cause (ErrLeaseLost). A MultiLock lock
// context dropped without Unlock is released as a whole once it is garbage.
// Each member keeps its own lease and fencing token (Tokens); the Mutex of a
// member's name works with the lock context too (Token, HoldCount; Unlock
// releases that member alone).
//
// A MultiLock is immutable and safe for concurrent use.
type MultiLock struct {
	c       *Client
	names   []string // sorted, deduplicated
	mutexes []*Mutex // by names
	id      string   // identifies the set in lock contexts
	err     error    // bad input, reported by every method
}

// MultiLock returns the set of locks called names, taken and released
// together (see MultiLock). The names are deduplicated: a name given twice is
// one member, locked once. No names, or an invalid one, is reported by every
// method, wrapped in ErrInvalidName.
func (c *Client) MultiLock(names ...string) *MultiLock {
	ml := &MultiLock{c: c}
	if c.c == nil {
		ml.err = errZero("Client", "New")
		return ml
	}
	if len(names) == 0 {
		ml.err = fmt.Errorf("%w: a multi-lock needs at least one name", ErrInvalidName)
		return ml
	}
	for i, name := range names {
		if err := core.ValidateName(name, ErrInvalidName); err != nil {
			ml.err = fmt.Errorf("rlock: multi-lock name %d of %d: %w", i+1, len(names), core.Inner(err))
			return ml
		}
	}
	ml.names = slices.Compact(slices.Sorted(slices.Values(names)))
	for _, name := range ml.names {
		ml.mutexes = append(ml.mutexes, c.Mutex(name))
	}
	ml.id = strings.Join(ml.names, "\x00") // no valid name holds a NUL
	return ml
}

// Names returns the members' names in acquisition order: sorted and
// deduplicated.
func (ml *MultiLock) Names() []string { return slices.Clone(ml.names) }

// String describes the MultiLock for logs.
func (ml *MultiLock) String() string { return fmt.Sprintf("rlock.MultiLock(%q)", ml.names) }

// label names the MultiLock in error messages, after the package prefix.
func (ml *MultiLock) label() string { return fmt.Sprintf("multi-lock %q", ml.names) }

// Lock blocks until it holds every member, ctx is done, or the wait timeout of
// WithWaitTimeout (which bounds the whole wait) runs out; WithLease gives each
// member that lease. It waits as described in MultiLock: in member order,
// without polling, and never in a deadlock with other MultiLocks.
//
// ctx bounds the wait only. On success it returns the lock context that
// carries every member's hold, each held when Lock returns (a member lost
// while Lock waited for others is taken again first, see MultiLock); it has
// ctx's values and ends as described in MultiLock, as soon as any member's
// hold ends, not with ctx. Pass it, not ctx, to Unlock. On failure nothing is held: the members taken are released
// in Redis before it returns. The error is that of the member that failed,
// as Mutex.Lock reports it: matching ctx's error when ctx ended, ErrLocked
// and context.DeadlineExceeded when the wait timeout ran out; or, matching
// ErrLeaseLost, one naming a member lost (its lease ran out) before the others
// were taken, with no wait in between.
//
// Members that ctx holds already are re-entered (their hold count rises by
// one, and Unlock lowers it again), keeping the lease they were taken with
// (WithLease applies to the members the call takes); a ctx that holds the
// whole MultiLock re-enters all of it and gets a new lock context for the
// inner hold.
func (ml *MultiLock) Lock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return ml.lock(ctx, true, opts)
}

// TryLock makes one attempt at each member in order, and returns the lock
// context as Lock does, or, when a member is taken, an error matching
// ErrLocked that names it; the members taken before it are released in Redis
// before it returns, so nothing is held then. A member whose hold ended
// before the others were taken (a WithLease lease shorter than the attempts)
// fails it too, with an error matching ErrLeaseLost that names it.
func (ml *MultiLock) TryLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return ml.lock(ctx, false, opts)
}

// Unlock releases one level of every member's hold carried by lockCtx, the
// members at once (their round trips to Redis overlap), and cancels lockCtx
// with cause ErrUnlocked. It releases every member it can even when some
// fail: the error joins the members' errors, in reverse member order, each
// as Mutex.Unlock reports it (ErrNotHeld and ErrLeaseLost for a member whose
// lease was lost, ErrAbandoned for a release that could not reach Redis). It
// fails with ErrNotHeld when lockCtx carries no hold of the MultiLock (or it
// was unlocked already).
func (ml *MultiLock) Unlock(lockCtx context.Context) error {
	if ml.err != nil {
		return ml.err
	}
	mh := ml.holdOf(lockCtx)
	if mh == nil {
		return fmt.Errorf("%w: the context holds no %s: pass the lock context that Lock returned (or one derived from it), not the context given to Lock",
			ErrNotHeld, ml.label())
	}
	if !mh.end() {
		return fmt.Errorf("%w: %s was already unlocked by this context", ErrNotHeld, ml.label())
	}
	return ml.releaseMembers(lockCtx, mh)
}

// releaseMembers releases one level of every member hold of mh, all at once,
// and joins their errors in reverse member order.
func (ml *MultiLock) releaseMembers(ctx context.Context, mh *multiHold) error {
	errs := make([]error, len(mh.holds))
	atOnce(len(mh.holds), func(i int) {
		errs[i] = ml.mutexes[i].release(ctx, mh.holds[i], releaseTurn)
	})
	slices.Reverse(errs)
	return errors.Join(errs...)
}

// atOnce runs f(0) ... f(n-1) at the same time, the last in the calling
// goroutine, and returns when every one has: the members' releases (or
// attempts) are round trips to different keys, which the Client's pipeline
// sends together, so a set costs one round trip rather than one a member.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n - 1 {
		wg.Go(func() { f(i) })
	}
	if n > 0 {
		f(n - 1)
	}
	wg.Wait()
}

// releaseDropped releases mh, whose lock context the program dropped (see
// core.WatchDrop), as Unlock would. It reports whether mh was still held.
func (ml *MultiLock) releaseDropped(mh *multiHold) (bool, error) {
	if !mh.end() {
		return false, nil
	}
	return true, ml.releaseMembers(context.Background(), mh)
}

// Tokens returns the fencing token of each member's hold carried by lockCtx,
// by name (see Mutex.Token). It fails with ErrNotHeld when lockCtx carries no
// hold of the MultiLock (a hold that ended still reports its tokens).
func (ml *MultiLock) Tokens(lockCtx context.Context) (map[string]uint64, error) {
	if ml.err != nil {
		return nil, ml.err
	}
	mh := ml.holdOf(lockCtx)
	if mh == nil {
		return nil, fmt.Errorf("%w: the context holds no %s", ErrNotHeld, ml.label())
	}
	tokens := make(map[string]uint64, len(mh.holds))
	for i, h := range mh.holds {
		tokens[ml.names[i]] = h.Token()
	}
	return tokens, nil
}

// multiKey finds the MultiLock holds carried by a context: the innermost
// multiLink, chained to those of the contexts it derives from.
type multiKey struct{}

type multiLink struct {
	c     *core.Client
	id    string
	mh    *multiHold
	outer *multiLink
}

// multiHold is one MultiLock acquisition: the member holds, by member index.
type multiHold struct {
	holds  []*core.Hold
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	ended  bool
}

// end marks the hold unlocked and cancels its lock context; false if it was
// unlocked already.
func (mh *multiHold) end() bool {
	mh.mu.Lock()
	defer mh.mu.Unlock()
	if mh.ended {
		return false
	}
	mh.ended = true
	mh.cancel(ErrUnlocked)
	return true
}

func (ml *MultiLock) holdOf(ctx context.Context) *multiHold {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(multiKey{}).(*multiLink)
	for ; l != nil; l = l.outer {
		if l.c == ml.c.c && l.id == ml.id {
			return l.mh
		}
	}
	return nil
}

// lock is Lock (wait) and TryLock.
func (ml *MultiLock) lock(ctx context.Context, wait bool, opts []LockOption) (context.Context, error) {
	if ml.err != nil {
		return nil, ml.err
	}
	if ml.c == nil {
		return nil, errZero("MultiLock", "Client.MultiLock")
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	lc, err := newLockConfig(opts)
	if err != nil {
		return nil, err
	}
	a := &multiAcquisition{ml: ml, ctx: ctx, wait: wait && !lc.tryOnce, blocked: -1,
		held: make([]context.Context, len(ml.mutexes))}
	a.opts = []LockOption{asMember()} // the MultiLock's context is watched
	if lc.leaseSet {
		a.opts = append(a.opts, WithLease(lc.lease))
	}
	if a.wait && lc.waitSet {
		a.deadline = time.Now().Add(lc.waitTimeout)
	}
	return a.run()
}

// multiAcquisition is one Lock or TryLock call of a MultiLock. held[i] is the
// context returned by member i's Lock or TryLock while it is held, nil
// otherwise. blocked is the member the current round started by blocking on
// (held), -1 in the first round: members after it are waited for, members
// before it only tried; a member before it that is taken starts the next
// round, with an earlier blocked member.
type multiAcquisition struct {
	ml       *MultiLock
	ctx      context.Context
	wait     bool
	deadline time.Time
	opts     []LockOption
	held     []context.Context
	blocked  int
	waited   bool // blocked on a member since the last check for lost ones
}

func (a *multiAcquisition) run() (context.Context, error) {
	ml := a.ml
	for {
		conflict, conflictErr, err := a.round()
		if err != nil {
			a.releaseAll()
			return nil, err
		}
		if conflict < 0 {
			lost := a.dropLost()
			if lost < 0 {
				return ml.hold(a.ctx, a.held)
			}
			if !a.waited {
				// Lost without a wait in between: the lease is too short
				// to take the set, and trying again would spin.
				a.releaseAll()
				return nil, fmt.Errorf("rlock: %s member %q: lost before every member was held: %w",
					ml.label(), ml.names[lost], ErrLeaseLost)
			}
			a.waited = false
			continue // the next round takes the lost members again
		}
		a.releaseAll()
		if !a.wait {
			return nil, fmt.Errorf("rlock: %s member %q: %w", ml.label(), ml.names[conflict], core.Inner(conflictErr))
		}
		lockCtx, err := ml.wait(a.ctx, ml.mutexes[conflict], a.deadline, a.optsFor(ml.mutexes[conflict]))
		if err != nil {
			return nil, err
		}
		a.held[conflict], a.blocked, a.waited = lockCtx, conflict, true
	}
}

// round takes the members not held, in order. It blocks on a member after
// blocked only when no member after it is held (one lost meanwhile, see
// dropLost, is only tried), and tries the others once. It stops at the first
// one taken (for a blocking Lock, or unreachable for now: the member's Lock
// retries connection errors while ctx lasts) and returns its index
// (conflict, -1 when none) and error; err is a failure that ends the call.
//
// The tries go one after another, not at once: under contention, members
// after a taken one, taken at once only to be released again, made other
// MultiLocks' tries fail (bench-kinds' multi point, six alternations: 523
// sets/s at once, 546 in order).
func (a *multiAcquisition) round() (conflict int, conflictErr, err error) {
	for i, m := range a.ml.mutexes {
		if a.held[i] != nil {
			continue
		}
		if a.blocked >= 0 && i > a.blocked && !slices.ContainsFunc(a.held[i+1:], isHeld) {
			if a.held[i], err = a.ml.wait(a.ctx, m, a.deadline, a.optsFor(m)); err != nil {
				return -1, nil, err
			}
			a.waited = true
			continue
		}
		lockCtx, err := m.TryLock(a.ctx, a.optsFor(m)...)
		if err == nil {
			a.held[i] = lockCtx
			continue
		}
		if errors.Is(err, ErrLocked) || a.wait && core.Retryable(a.ctx, err) && !errors.Is(err, ErrClosed) {
			return i, err, nil
		}
		return -1, nil, err
	}
	return -1, nil, nil
}

func isHeld(lockCtx context.Context) bool { return lockCtx != nil }

// dropLost gives up the members whose hold ended (a lease that ran out, a
// loss) while the call waited for others: a lock context is returned only
// when every member is held. It returns the first such member, -1 if none.
func (a *multiAcquisition) dropLost() int {
	first := -1
	now := time.Now()
	for i, lockCtx := range a.held {
		h := a.ml.mutexes[i].holdOf(lockCtx)
		if h == nil {
			continue
		}
		if ended, _ := h.State(); !ended && now.Before(h.ValidUntil()) {
			continue
		}
		// Ended: nothing to release; past its lease here but not yet ended,
		// it may still be ours in Redis.
		_ = a.ml.mutexes[i].unlockInRedis(lockCtx)
		a.held[i] = nil
		if first < 0 {
			first = i
		}
	}
	return first
}

// optsFor is the options of the call for member m: without its lease when
// ctx holds m already, so that re-entering a member leaves the lease of the
// outer hold as it was (a fixed lease would end its renewals, for good, even
// when the call fails).
func (a *multiAcquisition) optsFor(m *Mutex) []LockOption {
	if m.holdOf(a.ctx) != nil {
		return a.opts[:1] // asMember
	}
	return a.opts
}

// releaseAll releases the members held by scripts in Redis that end before
// it returns, never keeping one for the Client for a linger nor passing it to
// a goroutine of the Client without Redis (see Mutex.unlockInRedis): a failed
// call holds nothing when it returns, and a member it blocks on next is not
// held back from other Clients meanwhile.
func (a *multiAcquisition) releaseAll() {
	var held []int
	for i, lockCtx := range a.held {
		if lockCtx != nil {
			held = append(held, i)
		}
	}
	atOnce(len(held), func(k int) {
		i := held[k]
		// A release that fails gives the hold up (see Mutex.Unlock): it
		// expires with its lease; there is nothing more to do.
		_ = a.ml.mutexes[i].unlockInRedis(a.held[i])
		a.held[i] = nil
	})
}

// wait blocks on one member, within what is left of the wait timeout.
func (ml *MultiLock) wait(ctx context.Context, m *Mutex, deadline time.Time, opts []LockOption) (context.Context, error) {
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("%w: %s member %q still taken when the wait timeout ran out: %w", ErrLocked, ml.label(), m.name, context.DeadlineExceeded)
		}
		opts = append(slices.Clip(opts), WithWaitTimeout(left))
	}
	return m.Lock(ctx, opts...)
}

// hold makes the lock context of a complete acquisition: with ctx's values,
// carrying every member's hold, and cancelled when any of them ends (for a
// member ctx held already, the outer hold it re-entered). It waits on the
// holds' own contexts (core.Hold.Ctx), not the members' lock contexts, so
// that nothing but the returned context keeps its multiLink reachable (see
// core.WatchDrop).
func (ml *MultiLock) hold(ctx context.Context, held []context.Context) (context.Context, error) {
	lockCtx, cancel := core.LockContext(ctx)
	mh := &multiHold{holds: make([]*core.Hold, len(held)), cancel: cancel}
	links, _ := ctx.Value(holdsKey{}).(*holdLink)
	var stops []func() bool
	for i, member := range held {
		m := ml.mutexes[i]
		h := m.holdOf(member)
		mh.holds[i] = h
		if member != ctx { // else re-entered: ctx carries the hold already
			links = &holdLink{c: m.c, name: m.name, h: h, outer: links}
		}
		if hc := h.Ctx(); hc != nil {
			stops = append(stops, context.AfterFunc(hc, func() {
				cancel(fmt.Errorf("rlock: %s member %q: %w", ml.label(), m.name, core.Inner(context.Cause(hc))))
			}))
		}
	}
	// A re-entered member's hold outlives this one: stop waiting on it.
	context.AfterFunc(lockCtx, func() {
		for _, stop := range stops {
			stop()
		}
	})
	lockCtx = context.WithValue(lockCtx, holdsKey{}, links)
	outer, _ := ctx.Value(multiKey{}).(*multiLink)
	l := &multiLink{c: ml.c.c, id: ml.id, mh: mh, outer: outer}
	core.WatchDrop(ml.c.c, l, &core.Dropped{What: "multilock", Name: strings.Join(ml.names, ","), Owner: ml.c.c.ID,
		Release: func() (bool, error) { return ml.releaseDropped(mh) }, Holds: mh.holds})
	return context.WithValue(lockCtx, multiKey{}, l), nil
}
