package rlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
)

// QuorumMutex is a lock held on a majority of a Quorum's masters (Redlock).
// Get one from Quorum.Mutex. Read the Quorum's documentation for what it does
// and does not promise: it has no fencing token, and it relies on bounded
// pauses and clock drift.
//
// Ownership travels in the context, as with Mutex: Lock and TryLock return a
// lock context that carries the hold; pass it to Unlock, and to Lock to
// re-enter (re-entries are counted in the process, not on the masters). The
// lock context keeps the values of Lock's ctx but not its cancellation (see
// Lock context in the package documentation): it is cancelled with cause
// ErrUnlocked by the final Unlock, and with a cause matching ErrLeaseLost when
// fewer than a majority of the masters confirm the hold any more.
type QuorumMutex struct {
	q    *Quorum
	name string
	err  error // invalid name, reported by every method
	keys keys
	// gateFrom is the master gated rounds of this lock ask first (see
	// quorum_gate.go).
	gateFrom int
}

// Name returns the name the lock was created with.
func (qm *QuorumMutex) Name() string { return qm.name }

// String describes the lock for logs.
func (qm *QuorumMutex) String() string {
	return "rlock.QuorumMutex(" + strconv.Quote(qm.name) + ")"
}

// Lock blocks until it holds the lock on a majority of the masters, ctx is
// done, or the wait timeout of WithWaitTimeout runs out. Each round asks the
// lock's gate master first and, once it granted, the others at once; when a
// round does not win, what it took is given back (see Quorum). Between rounds
// Lock waits without polling: for a release announced by the gate (by any
// master when it lost elsewhere, and by the others when the gate stays
// silent), or until the leases of the holder it saw would leave it without a
// majority (so a lost message costs at most that), or, after a split vote
// between contenders, a short random delay.
//
// ctx bounds the wait only. On success it returns the lock context carrying
// the hold (with ctx's values, ended by this hold only; pass it, not ctx, to
// Unlock): the lock is held on a majority of the masters, for the validity
// that Validity reports. Without WithLease the watchdog of each master's Client
// renews it there until Unlock. On failure nothing is held, and what a round
// took on the masters that answered has been given back (on others it is
// given back in the background, or expires with its lease). The error matches
// ErrNoQuorum (and ErrUnavailable, wrapping the last connection error) when
// too many masters could not be reached for a majority (ErrNoQuorum and
// ErrPermission, at once, when too many refused the Redis user a command: an
// ACL), ErrLocked (and context.DeadlineExceeded) when the wait timeout ran
// out while other owners
// held the lock, ErrNotReplicated when (with WithReplicaAck, see Quorum) a
// round had a majority only counting the votes that too few replicas of
// their master acknowledged (with WithReplicaAckRetry Lock tries again
// instead, and the error matches it when the wait ends after such a round),
// and otherwise ctx's error.
//
// If ctx already holds the lock, Lock re-enters at once and returns ctx; a
// re-entry cannot change the lease (WithLease is refused).
func (qm *QuorumMutex) Lock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return qm.lock(ctx, true, opts)
}

// TryLock makes one round. It returns the lock context as Lock does, or an
// error matching ErrLocked when other owners hold the lock on too many
// masters, ErrNoQuorum when too many masters could not be reached (or the
// round took longer than the lease allows), or ErrNotReplicated when too few
// of its votes were acknowledged by replicas (WithReplicaAck; the round's
// votes were given back). A context that already holds the lock re-enters.
func (qm *QuorumMutex) TryLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return qm.lock(ctx, false, opts)
}

func (qm *QuorumMutex) lock(ctx context.Context, wait bool, opts []LockOption) (context.Context, error) {
	lc, wait, err := lockCall(ctx, wait, opts, qm.err)
	if err != nil {
		return nil, err
	}
	q := qm.q
	if q == nil {
		return nil, errZero("QuorumMutex", "Quorum.Mutex")
	}
	if !q.enter() {
		return nil, ErrClosed
	}
	defer q.exit()
	if qh := qm.holdOf(ctx); qh != nil {
		return qm.reenter(ctx, qh, lc)
	}
	lease, renew := q.lease, true
	if lc.leaseSet {
		lease, renew = lc.lease, false
	}
	// WithReplicaAckRetry (the same for every master): a round lost for
	// want of acknowledgements is tried again rather than failed.
	ackRetry := q.masters[0].c.Cfg.ReplicaAckRetry
	// TryLock's one round looks at every master: a gate held by a contender
	// that crashed before it took a majority would otherwise refuse it.
	var call *gateCall
	if wait {
		call = &gateCall{id: q.newOwner()}
		defer qm.leaveGate(call)
	}
	r := qm.round(ctx, lease, call)
	switch {
	case r.won:
		return qm.hold(ctx, r, renew)
	case ctx.Err() != nil:
		return nil, qm.wrap("lock", core.CtxError(ctx))
	case !wait || r.notReplicated(q.major) && !ackRetry:
		return nil, qm.failure(r, nil)
	}
	waitCtx := ctx
	if lc.waitSet {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(ctx, lc.waitTimeout, &waitTimeoutError{D: lc.waitTimeout})
		defer cancel()
	}
	return qm.wait(ctx, waitCtx, call, r, lease, renew)
}

// wait makes rounds until one wins or waitCtx ends: after a release is
// announced (see sleep), and else when the holders' leases end (see
// retryIn), with backoff while too few masters answer. first is the round
// that failed before the wait.
func (qm *QuorumMutex) wait(ctx, waitCtx context.Context, call *gateCall, first *round, lease time.Duration, renew bool) (context.Context, error) {
	q := qm.q
	ackRetry := q.masters[0].c.Cfg.ReplicaAckRetry
	l := qm.listen(waitCtx, call.id)
	defer l.stop()
	l.awaitReady(q.attemptTimeout(lease))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	last := first
	splits := 0
	backoff := time.Duration(0)
	full := false     // the next round asks every master at once
	stuck := ""       // the gate's holder a full round saw without a majority
	majority := first // the last round that saw a holder of a majority
	for {
		// The wake-ups so far are answered by this round; any that comes
		// during it or after makes another.
		l.drain()
		c := call
		if full || stuck != "" {
			c = nil
		}
		r := qm.round(waitCtx, lease, c)
		if c == nil {
			stuck = qm.stuckHolder(r)
		}
		if r.won {
			l.satisfied.Store(true)
			return qm.hold(ctx, r, renew)
		}
		if waitCtx.Err() == nil {
			last = r
			if (r.notReplicated(q.major) && !ackRetry) || r.refusedMajority(len(q.masters), q.major) {
				return nil, qm.failure(r, nil)
			}
		}
		if _, _, ok := r.majority(q.major); ok {
			majority = r
		}
		d := qm.nextRound(r, &backoff, &splits)
		// Lost at the gate to a holder no round saw hold a majority: it may
		// have crashed before taking one (see quorum_gate.go).
		stalled := r.lostAtGate && !r.votes[r.gate].reserved && !heldByMajority(majority, r.votes[r.gate].holder, q.major)
		if r.lostAtGate && (stalled || r.votes[r.gate].reserved) {
			// (Kept for another: that caller's round may lose and give the
			// gate back quietly; asking again soon costs one script.)
			d = min(d, q.gateStall(lease))
		}
		timer.Reset(d)
		var err error
		full, err = qm.sleep(waitCtx, l, timer, r, stalled, q.attemptTimeout(lease))
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			return nil, qm.failure(last, err)
		}
	}
}

// sleep waits after round r for a release to be announced or for timer; it
// returns whether the next round is to be full (see quorum_gate.go), or why
// the wait ended. After a round lost at the gate a release of the gate wakes
// it, and one of another master only if the gate says nothing for grace
// after it: a holder of the gate releases it with the rest (most releases of
// other masters the gate's announcement follows at once, or preceded), but
// the gate may have died or hung since, or its holder vanished while others
// took the lock by full rounds; the round after that silence is full.
func (qm *QuorumMutex) sleep(waitCtx context.Context, l *quorumListener, timer *time.Timer, r *round, stalled bool, grace time.Duration) (full bool, err error) {
	var silent <-chan time.Time // a release of another master heard: the gate's is due
	for {
		select {
		case <-l.wake:
			if r.lostAtGate && !l.heard[r.gate].Load() {
				if silent == nil {
					t := time.NewTimer(grace)
					defer t.Stop()
					silent = t.C
				}
				continue
			}
			return false, nil
		case <-silent:
			return true, nil
		case <-timer.C:
			return stalled, nil
		case <-qm.q.closed:
			return false, ErrClosed
		case <-waitCtx.Done():
			return false, core.CtxError(waitCtx)
		}
	}
}

// nextRound is how long to wait for a wake-up before the round after r.
func (qm *QuorumMutex) nextRound(r *round, backoff *time.Duration, splits *int) time.Duration {
	q := qm.q
	switch {
	case r.notReplicated(q.major):
		return ackRetryIn
	case r.failed > len(q.masters)-q.major:
		*backoff = min(max(2**backoff, minRetryBackoff), maxRetryBackoff)
		return *backoff
	}
	*backoff = 0
	return qm.retryIn(r, splits)
}

// Backoff of rounds that could not reach enough masters.
const (
	minRetryBackoff = 10 * time.Millisecond
	maxRetryBackoff = time.Second
)

// failure is the error of a Lock that ends without the lock, from what its
// last complete round learned; waitErr is why the wait ended (nil: TryLock).
func (qm *QuorumMutex) failure(r *round, waitErr error) error {
	q := qm.q
	n := len(q.masters)
	var timeout *waitTimeoutError
	timedOut := errors.As(waitErr, &timeout)
	switch {
	case errors.Is(waitErr, ErrClosed):
		return waitErr
	case r.refusedMajority(n, q.major):
		// An answer, and a final one: not an outage, and no use retrying.
		return fmt.Errorf("%w: lock %q: %d of %d masters refused the Redis user a command, and a lock needs %d: %w",
			ErrNoQuorum, qm.name, r.refused, n, q.major, r.refusal)
	case r.failed > n-q.major && waitErr != nil:
		return fmt.Errorf("%w: %w: lock %q: %d of %d masters could not be reached, and a lock needs %d: %w; last error: %w",
			ErrNoQuorum, ErrUnavailable, qm.name, r.failed, n, q.major, waitErr, r.lastErr)
	case r.failed > n-q.major:
		return fmt.Errorf("%w: %w: lock %q: %d of %d masters could not be reached, and a lock needs %d: %w",
			ErrNoQuorum, ErrUnavailable, qm.name, r.failed, n, q.major, r.lastErr)
	case r.granted >= q.major && waitErr == nil:
		return fmt.Errorf("%w: lock %q: taken on %d of %d masters, but the round took longer than the lease (%v) allows",
			ErrNoQuorum, qm.name, r.granted, n, r.lease)
	case r.notReplicated(q.major) && waitErr == nil:
		return fmt.Errorf("%w: lock %q: taken on %d of %d masters, %d of them acknowledged by enough of their replicas within %v, and a lock needs %d",
			ErrNotReplicated, qm.name, r.granted+r.unacked, n, r.granted, q.masters[0].c.Cfg.ReplicaAckTimeout, q.major)
	case r.notReplicated(q.major):
		return fmt.Errorf("%w: lock %q: the last round was taken on %d of %d masters, %d of them acknowledged by enough of their replicas within %v, and a lock needs %d: %w",
			ErrNotReplicated, qm.name, r.granted+r.unacked, n, r.granted, q.masters[0].c.Cfg.ReplicaAckTimeout, q.major, waitErr)
	case waitErr == nil:
		return fmt.Errorf("%w: %q is held by other owners on %d of %d masters (a lock needs %d)", ErrLocked, qm.name, r.taken, n, q.major)
	case timedOut && r.taken > 0:
		return fmt.Errorf("%w: %q after waiting %v: %w", ErrLocked, qm.name, timeout.D, context.DeadlineExceeded)
	}
	return qm.wrap("lock", waitErr)
}

// hold turns a winning round into a lock context. If ctx ended in the
// meantime the lock is given back, so a cancelled Lock never leaves a hold.
func (qm *QuorumMutex) hold(ctx context.Context, r *round, renew bool) (context.Context, error) {
	q := qm.q
	if err := ctx.Err(); err != nil {
		qm.giveBackRound(r)
		return nil, qm.wrap("lock", core.CtxError(ctx))
	}
	lockCtx, cancel := core.LockContext(ctx)
	qh := &quorumHold{qm: qm, cancel: cancel, holds: make([]*core.Hold, len(q.masters)), count: 1}
	var made []*core.Hold
	qh.mu.Lock()
	for i, v := range r.votes {
		if v.kind != voteGranted {
			continue
		}
		c := q.masters[i].c
		h := c.NewHold(core.HoldSpec{Kind: mutexKind, Name: qm.name, Key: qm.keys.lock, Owner: r.owner, Lease: r.lease, Renew: renew,
			Count: 1, Cancel: func(cause error) { qh.masterEnded(i, cause) }})
		if c.Register(h) {
			qh.holds[i] = h
			qh.live++
		}
		made = append(made, h)
	}
	ok := qh.live >= q.major
	if !ok {
		qh.ended, qh.cause = true, ErrClosed
	}
	qh.mu.Unlock()
	if !ok { // a master's Client closed: the Quorum is closing
		for _, h := range made {
			h.End(ErrUnlocked)
		}
		cancel(ErrClosed)
		qm.giveBackRound(r)
		return nil, ErrClosed
	}
	for i, h := range qh.holds {
		if h != nil {
			h.Start(r.votes[i].sent)
		}
	}
	outer, _ := ctx.Value(quorumHoldsKey{}).(*quorumLink)
	// The masters' holds reach qh (their cancel functions), not the link.
	l := &quorumLink{q: q, name: qm.name, h: qh, outer: outer}
	core.WatchDrop(q.masters[0].c, l, &core.Dropped{What: "quorum lock", Name: qm.name, Owner: r.owner,
		Release: func() (bool, error) { return qm.releaseDropped(qh) }, Holds: qh.holds})
	return context.WithValue(lockCtx, quorumHoldsKey{}, l), nil
}

// releaseDropped releases qh, whose lock context the program dropped (see
// core.WatchDrop), on every master, whatever its re-entry count. It reports
// whether qh was still held.
func (qm *QuorumMutex) releaseDropped(qh *quorumHold) (bool, error) {
	qh.mu.Lock()
	if qh.ended {
		qh.mu.Unlock()
		return false, nil
	}
	qh.ended, qh.cause = true, ErrUnlocked
	holds := slices.Clone(qh.holds)
	qh.mu.Unlock()
	qh.cancel(ErrUnlocked)
	return true, qm.releaseAll(holds, true)
}

// giveBackRound gives back, in the background, every vote of a round that
// won but is not kept.
func (qm *QuorumMutex) giveBackRound(r *round) {
	for i, v := range r.votes {
		if v.kind == voteGranted {
			qm.giveBack(qm.q.masters[i].c, r.owner, r.lease, false)
		}
	}
}

func (qm *QuorumMutex) reenter(ctx context.Context, qh *quorumHold, lc lockConfig) (context.Context, error) {
	if lc.leaseSet {
		return nil, fmt.Errorf("%w: re-entering quorum lock %q with WithLease: a quorum hold keeps the lease of its first Lock", ErrInvalidOption, qm.name)
	}
	qh.mu.Lock()
	defer qh.mu.Unlock()
	if qh.ended {
		return nil, qm.notHeld(qh.cause)
	}
	qh.count++
	return ctx, nil
}

// Unlock releases one level of the hold carried by lockCtx; the last one
// releases the lock on every master it was taken on, at once, and cancels
// lockCtx with cause ErrUnlocked.
//
// It returns nil when a majority of those masters confirmed the release:
// another owner may take the lock at once. It waits for the releases on
// every master for up to the attempt timeout and then returns as soon as a
// majority confirmed; releases on masters that do not answer go on in the
// background for up to the unlock timeout (WithUnlockTimeout), and are then
// given up: such a master frees the lock when its lease runs out. When fewer
// than a majority confirm, the error matches ErrAbandoned (an *AbandonError
// says by when every master frees the lock), or ErrNotHeld with
// ErrLeaseLost when the masters said the hold was gone already. It fails with
// ErrNotHeld when lockCtx holds no hold of the lock (or it ended: the cause
// tells why).
func (qm *QuorumMutex) Unlock(lockCtx context.Context) error {
	if qm.err != nil {
		return qm.err
	}
	qh := qm.holdOf(lockCtx)
	if qh == nil {
		return qm.noHold(lockCtx)
	}
	qh.mu.Lock()
	if qh.ended {
		qh.mu.Unlock()
		return qm.notHeld(qh.cause)
	}
	if qh.count > 1 {
		qh.count--
		qh.mu.Unlock()
		return nil
	}
	qh.ended, qh.cause = true, ErrUnlocked
	holds := slices.Clone(qh.holds)
	qh.mu.Unlock()
	qh.cancel(ErrUnlocked)
	return qm.releaseAll(holds, true)
}

// Validity returns how long the hold carried by lockCtx stays valid without a
// renewal: until fewer than a majority of its masters' leases remain, as last
// confirmed, each measured on the monotonic clock from when the command that
// set it was sent, less the drift margin. The watchdog renews it every third
// of the watchdog timeout, so it stays between about two thirds of the lease
// and the lease; a hold with WithLease counts down. It fails with ErrNotHeld
// when lockCtx carries no hold of the lock, or it ended.
func (qm *QuorumMutex) Validity(lockCtx context.Context) (time.Duration, error) {
	if qm.err != nil {
		return 0, qm.err
	}
	qh := qm.holdOf(lockCtx)
	if qh == nil {
		return 0, qm.noHold(lockCtx)
	}
	qh.mu.Lock()
	defer qh.mu.Unlock()
	if qh.ended {
		return 0, qm.notHeld(qh.cause)
	}
	return max(time.Until(qh.validUntilLocked()), 0), nil
}

func (qm *QuorumMutex) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	return core.Refused(fmt.Errorf("rlock: %s quorum lock %q: %w", op, qm.name, core.Inner(err)))
}

// noHold is the error of a call given a context that carries no hold of the
// lock (see Mutex.noHold).
func (qm *QuorumMutex) noHold(ctx context.Context) error {
	if ctx != nil {
		for l, _ := ctx.Value(quorumHoldsKey{}).(*quorumLink); l != nil; l = l.outer {
			if l.q != qm.q && l.name == qm.name {
				return fmt.Errorf("%w: the context holds quorum lock %q through another Quorum: use that Quorum's QuorumMutex", ErrNotHeld, qm.name)
			}
		}
	}
	return fmt.Errorf("%w: the context holds no quorum lock %q: pass the lock context that Lock returned (or one derived from it), not the context given to Lock",
		ErrNotHeld, qm.name)
}

func (qm *QuorumMutex) notHeld(cause error) error {
	if cause == nil || errors.Is(cause, ErrUnlocked) {
		return fmt.Errorf("%w: quorum lock %q was already unlocked by this context", ErrNotHeld, qm.name)
	}
	return fmt.Errorf("%w: quorum lock %q: %w", ErrNotHeld, qm.name, core.Inner(cause))
}

// quorumHoldsKey finds the quorum holds carried by a context, as holdsKey
// does for Mutex holds.
type quorumHoldsKey struct{}

type quorumLink struct {
	q     *Quorum
	name  string
	h     *quorumHold
	outer *quorumLink
}

func (qm *QuorumMutex) holdOf(ctx context.Context) *quorumHold {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(quorumHoldsKey{}).(*quorumLink)
	for ; l != nil; l = l.outer {
		if l.q == qm.q && l.name == qm.name {
			return l.h
		}
	}
	return nil
}

// quorumHold is one owner's hold of a quorum lock: a core.Hold on each master
// that granted it, each renewed by its master's watchdog and ended when its
// master's lease is lost.
type quorumHold struct {
	qm     *QuorumMutex
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	holds []*core.Hold // by master; nil where the lock was not taken
	live  int          // holds not ended
	count int          // re-entries, counted here only
	ended bool
	cause error
}

// validUntilLocked is when fewer than a majority of the live holds' confirmed
// leases remain.
func (qh *quorumHold) validUntilLocked() time.Time {
	var ends []time.Time
	for _, h := range qh.holds {
		if h == nil {
			continue
		}
		if ended, _ := h.State(); !ended {
			ends = append(ends, h.ValidUntil())
		}
	}
	major := qh.qm.q.major
	if len(ends) < major {
		return time.Time{}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	return ends[major-1]
}

// masterEnded is called when the hold on master i ends (its lease was lost,
// it was released, or its Client closed). When fewer than a majority of the
// holds remain, the quorum hold is lost: its lock context is cancelled, and
// the holds left are released (they would only keep others out).
func (qh *quorumHold) masterEnded(i int, cause error) {
	qm := qh.qm
	q := qm.q
	qh.mu.Lock()
	if qh.holds[i] == nil { // never registered
		qh.mu.Unlock()
		return
	}
	qh.live--
	if qh.ended || qh.live >= q.major {
		qh.mu.Unlock()
		return
	}
	qh.ended = true
	qh.cause = fmt.Errorf("%w: quorum lock %q is held on %d of %d masters, fewer than the majority of %d (last: %w)",
		ErrLeaseLost, qm.name, qh.live, len(q.masters), q.major, cause)
	holds := slices.Clone(qh.holds)
	qh.mu.Unlock()
	qh.cancel(qh.cause)
	if !q.isClosed() {
		_ = qm.releaseAll(holds, false)
	}
}

// releaseAll releases the given holds (by master) at once, each in the
// background for up to the unlock timeout. With wait, it waits for them as
// Unlock describes and returns Unlock's result.
func (qm *QuorumMutex) releaseAll(holds []*core.Hold, wait bool) error {
	q := qm.q
	type result struct {
		released, gone bool
		err            error
	}
	results := make(chan result, len(holds))
	started := 0
	var lease time.Duration
	for i, h := range holds {
		if h == nil {
			continue
		}
		lease, _ = h.Lease()
		c := q.masters[i].c
		if c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
			released, gone, err := qm.releaseOn(ctx, c, h)
			results <- result{released, gone, err}
		}) {
			started++
		} else {
			h.End(ErrUnlocked) // closing: it expires with its lease
		}
	}
	if !wait {
		return nil
	}
	grace := time.NewTimer(q.attemptTimeout(lease))
	defer grace.Stop()
	graceOver := false
	released, gone, got := 0, 0, 0
	var lastErr error
	for got < started && !(graceOver && released >= q.major) {
		select {
		case r := <-results:
			got++
			switch {
			case r.released:
				released++
			case r.gone:
				gone++
			default:
				lastErr = r.err
			}
		case <-grace.C:
			graceOver = true
		}
	}
	switch {
	case released >= q.major:
		return nil
	case got == started && lastErr == nil:
		return qm.notHeld(fmt.Errorf("%w: the release found it on %d of its masters, fewer than the majority of %d", ErrLeaseLost, released, q.major))
	}
	if lastErr == nil {
		lastErr = errors.New("no answer")
	}
	bound := lease + 2*q.lease/3 // a renewal sent just before may still run
	ae := &AbandonError{Op: "unlock", FreeBy: time.Now().Add(bound), Err: lastErr}
	return fmt.Errorf("rlock: unlock quorum lock %q: released on %d masters, fewer than the majority of %d: %w", qm.name, released, q.major, ae)
}

// releaseOn releases h, a quorum hold's lease on master c, with release.lua
// (idempotent per request id, retried while ctx lasts). released: the lock
// was freed there; gone: it was not held there any more. A release that
// fails gives h up (core.Hold.Abandon): its clean-up runs in the background
// until the lease would have run out.
func (qm *QuorumMutex) releaseOn(ctx context.Context, c *core.Client, h *core.Hold) (released, gone bool, err error) {
	h.BeginRelease()
	defer h.EndRelease()
	lease, _ := h.Lease()
	req := newRequest(c)
	var r releaseReply
	err = core.RetryTransient(ctx, func() (err error) {
		r, err = releaseScriptAnnouncing(ctx, c, qm.keys, h.Owner(), req, lease, nil, false, unlockMessage)
		c.NoteError(err)
		return err
	})
	switch {
	case err != nil:
		ae := h.Abandon("unlock", err, func(ctx context.Context) error {
			return abandonScript(ctx, c, qm.keys, h.Owner(), "-", lease, false)
		})
		return false, false, ae
	case r.left < 0:
		h.End(ErrLeaseLost)
		return false, true, nil
	case r.left == 0:
		h.End(ErrUnlocked)
		return true, false, nil
	}
	h.End(ErrLeaseLost)
	return false, false, fmt.Errorf("rlock: unexpected release reply: %d holds left of a quorum hold", r.left)
}
