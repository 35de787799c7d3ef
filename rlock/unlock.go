package rlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
)

// Unlock releases one level of the hold carried by lockCtx. The final level
// gives the lock to the next waiter: a goroutine of this Client while the
// Client's turn lasts (no round trip), else the head of the Redis queue, told
// by one message; with no one waiting the lock is deleted and announced. When
// other Clients wait and the turn allows, the lock is kept for this Client's
// next Lock for up to the linger (see WithLinger) and released in Redis then.
// It stops renewals and cancels lockCtx with cause ErrUnlocked. A fair Mutex
// (Client.FairMutex) always releases in Redis, to the head of its queue.
//
// lockCtx must be the context Lock returned (or one derived from it), not the
// context given to Lock: that one carries no hold, and Unlock then fails with
// an ErrNotHeld that says so, leaving the lock held (a deferred Unlock
// discards that error: check it, or rely on the release of a dropped lock
// context, see Lock context in the package documentation).
//
// Unlock works even when lockCtx is cancelled; it retries connection errors for
// up to the unlock timeout with an idempotent request, so a retried release never
// counts twice. It fails with ErrNotHeld when lockCtx does not hold the lock (it
// never did, it holds it through another Client's Mutex, it was already fully
// unlocked, or the lease was lost: then the error also matches ErrLeaseLost);
// Redis is left unchanged then. When the
// release itself fails (Redis unreachable past the unlock timeout, or the
// command denied), the hold is given up: it fails with an *AbandonError
// (ErrAbandoned), renewals stop so that Redis frees the lock within one lease
// at the latest (the error says when), and lockCtx is cancelled.
func (m *Mutex) Unlock(lockCtx context.Context) error {
	if m.err != nil {
		if m.c != nil {
			m.c.Released(lockCtx, mutexKind, "Unlock", m.name, time.Now(), false, m.err)
		}
		return m.err
	}
	if m.c != nil && m.c.Obs != nil {
		return m.observedUnlock(lockCtx)
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return m.noHold(lockCtx)
	}
	return m.release(lockCtx, h, releaseTurn)
}

// observedUnlock is Unlock told to the Client's Observer.
func (m *Mutex) observedUnlock(lockCtx context.Context) error {
	start := time.Now()
	h := m.holdOf(lockCtx)
	var err error
	if h == nil {
		err = m.noHold(lockCtx)
	} else {
		err = m.release(lockCtx, h, releaseTurn)
	}
	final := false
	if h != nil && err == nil {
		final, _ = h.State()
	}
	m.c.Released(lockCtx, mutexKind, "Unlock", m.name, start, final, err)
	return err
}

// unlockInRedis is Unlock by a script in Redis that ends before it returns:
// the final level neither keeps the lock for this Client's next Lock (a
// linger, see core.Turns.Park) nor passes it to a waiting goroutine of the
// Client without Redis (see core.Turns.PassOn); the script gives it to the head
// of the Redis queue, or frees it. A failed MultiLock releases its members so
// that it holds nothing when it returns.
func (m *Mutex) unlockInRedis(lockCtx context.Context) error {
	h := m.holdOf(lockCtx)
	if h == nil {
		return m.noHold(lockCtx)
	}
	return m.release(lockCtx, h, releaseInRedis)
}

// releaseMode is what the final level of a release may do in the Client
// instead of a script in Redis.
type releaseMode uint8

const (
	// releaseTurn passes the lock to a waiting goroutine of the Client, or
	// keeps it for the Client's next Lock for a moment (see core.Turns.Park).
	releaseTurn releaseMode = iota
	// releasePass passes the lock to a waiting goroutine, never keeps it.
	releasePass
	// releaseInRedis does neither: the release runs in Redis. A waiting
	// goroutine of the Client is queued there as its next leader (or, when
	// no one else waits, the script keeps the lock for it), but no place is
	// reserved for a Lock the Client has not made (see core.Turns.Reserve).
	releaseInRedis
)

// release releases one level of h (see core.Release); mode says whether the
// final level may pass the lock on or keep it in the Client.
func (m *Mutex) release(lockCtx context.Context, h *core.Hold, mode releaseMode) error {
	return m.releaseAs(lockCtx, h, nil, mode)
}

// releaseAs is release under request req (nil: a new one, made if a script
// runs).
func (m *Mutex) releaseAs(lockCtx context.Context, h *core.Hold, req *request, mode releaseMode) error {
	r := mutexReleases.Get().(*mutexRelease)
	*r = mutexRelease{Release: core.Release{Hold: h, Op: "unlock", Ended: ErrUnlocked, Caller: mode != releasePass}, m: m, req: req, mode: mode}
	err := r.Run(lockCtx, r)
	if !r.Abandoned {
		*r = mutexRelease{}
		mutexReleases.Put(r)
	}
	return err
}

// mutexReleases recycles the state of releases, as acquisitions does that
// of Lock calls: most Unlocks pass the lock on or keep it without Redis, and
// this state would be their largest allocation. Nothing keeps it once Run
// returns, but an abandoned release's clean-up (see core.Release.Abandoned).
var mutexReleases = sync.Pool{New: func() any { return new(mutexRelease) }}

// mutexRelease is one release of a Mutex hold: the Mutex's part of the
// release states (see core.Releaser).
type mutexRelease struct {
	core.Release
	m    *Mutex
	req  *request // made by the first round: a pass needs none
	mode releaseMode
	// local: the final level of a hold that is not fair, which may pass the
	// lock on or keep it in the Client. A fair hold formed no cohort: the
	// head of the Redis queue is next.
	local bool
}

// Pass passes the lock to a waiting goroutine of the Client, or keeps it
// for the Client's next Lock (see core.Turns.Park), as the mode allows.
func (r *mutexRelease) Pass(*core.Release) bool {
	m, h := r.m, r.Hold
	r.local = !m.fair
	return r.local && r.mode != releaseInRedis && (m.t.PassOn(m.name, h) || r.mode == releaseTurn && m.t.Park(m.turn(), h))
}

// Round runs release.lua. At most two rounds: one that may keep the lock
// for a local waiter (the successor), and, if that waiter cannot take it
// after all, one that lets it go.
func (r *mutexRelease) Round(ctx context.Context, _ *core.Release, t core.Ticket) (core.ReleaseReply, error) {
	m, h := r.m, r.Hold
	var next *core.Succession
	if r.local && r.Release.Round == 0 {
		next = m.t.Succeed(m.turn(), h, r.mode != releaseInRedis, m.keys.grants, recheckCap(m.c), keepHandOff)
	}
	if r.req == nil {
		r.req = newRequest(m.c) // one id for every retry of the round
	}
	var rr releaseReply
	err := core.RetryTransient(ctx, func() (err error) {
		rr, err = releaseScript(ctx, m.c, m.keys, h.Owner(), r.req, r.Lease, next, h.LateAttempts())
		m.c.NoteError(err)
		return err
	})
	if next != nil {
		next.Settle(core.SuccessionReply{Kept: rr.kept, Unqueued: rr.unqueued, Queued: rr.left == 0 && !rr.kept && !rr.unqueued,
			Place: rr.fence, Granted: rr.granted}, t, err)
	}
	switch {
	case err != nil:
		m.t.Dissolve(m.name, h)
		return core.ReleaseReply{}, err
	case rr.kept && next != nil:
		// No one else waits in Redis: the lock stayed ours for the next
		// local waiter. Pass it on; if that fails (it left, say), let the
		// lock go in a second round.
		if next.PassKept(t, r.Lease, rr.first, rr.last) {
			return core.ReleaseReply{Left: 0}, nil
		}
		r.req = newRequest(m.c)
		return core.ReleaseReply{Again: true}, nil
	case rr.kept:
		return core.ReleaseReply{Err: fmt.Errorf("unexpected reply: lock kept without a successor")}, nil
	case rr.left == 0 && r.local:
		m.t.NoteReleased(m.name)
	}
	return core.ReleaseReply{Left: rr.left}, nil
}

// Cleanup frees the owner field whatever the release did.
func (r *mutexRelease) Cleanup(ctx context.Context, _ *core.Release) error {
	return abandonScript(ctx, r.m.c, r.m.keys, r.Hold.Owner(), "-", r.Lease, r.Hold.LateAttempts())
}

func (r *mutexRelease) NotHeld(cause error) error { return r.m.notHeld(cause) }

func (r *mutexRelease) Wrap(err error) error { return r.m.wrap("unlock", err) }

// handOn takes over a lock passed to a Lock call that is leaving, and unlocks
// it at once: it goes to the next local waiter or back to Redis. A release
// that fails gives the hold up (see release), so nothing is left behind
// that the error could report.
func (m *Mutex) handOn(p *cohortPass) {
	h := m.c.NewHold(m.holdSpec(p.Owner, p.Token, p.Lease, true, 1, p.Late))
	if !m.t.TakeOver(m.turn(), h, p, ErrUnlocked) {
		return // closing: given back in Redis
	}
	_ = m.release(context.Background(), h, releasePass)
}
