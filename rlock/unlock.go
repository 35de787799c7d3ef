package rlock

import (
	"context"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
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
		return m.err
	}
	if m.c != nil && m.c.Obs != nil {
		return m.observedUnlock(lockCtx)
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return m.noHold(lockCtx)
	}
	return m.release(lockCtx, h, newRequest(m.c), releaseTurn)
}

// observedUnlock is Unlock told to the Client's Observer.
func (m *Mutex) observedUnlock(lockCtx context.Context) error {
	start := time.Now()
	h := m.holdOf(lockCtx)
	var err error
	if h == nil {
		err = m.noHold(lockCtx)
	} else {
		err = m.release(lockCtx, h, newRequest(m.c), releaseTurn)
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
// linger, see cohorts.park) nor passes it to a waiting goroutine of the
// Client without Redis (see cohorts.passOn); the script gives it to the head
// of the Redis queue, or frees it. A failed MultiLock releases its members so
// that it holds nothing when it returns.
func (m *Mutex) unlockInRedis(lockCtx context.Context) error {
	h := m.holdOf(lockCtx)
	if h == nil {
		return m.noHold(lockCtx)
	}
	return m.release(lockCtx, h, newRequest(m.c), releaseInRedis)
}

// releaseMode is what the final level of a release may do in the Client
// instead of a script in Redis.
type releaseMode uint8

const (
	// releaseTurn passes the lock to a waiting goroutine of the Client, or
	// keeps it for the Client's next Lock for a moment (see cohorts.park).
	releaseTurn releaseMode = iota
	// releasePass passes the lock to a waiting goroutine, never keeps it.
	releasePass
	// releaseInRedis does neither: the release runs in Redis. A waiting
	// goroutine of the Client is queued there as its next leader (or, when
	// no one else waits, the script keeps the lock for it), but no place is
	// reserved for a Lock the Client has not made (see cohorts.reserve).
	releaseInRedis
)

// release releases one level of h; mode says whether the final level may
// pass the lock on or keep it in the Client.
func (m *Mutex) release(lockCtx context.Context, h *core.Hold, req *request, mode releaseMode) error {
	h.Serial.Lock()
	defer h.Serial.Unlock()
	if ended, cause := h.State(); ended {
		return m.notHeld(cause)
	}
	n, releasing := h.Count()
	final := n == 1 && !releasing
	// A fair hold formed no cohort: it neither passes the lock on in the
	// Client nor keeps it for the Client; the head of the Redis queue is next.
	local := final && !m.fair
	if local && mode != releaseInRedis && (m.t.passOn(m.name, h) || mode == releaseTurn && m.t.park(m, h)) {
		h.End(ErrUnlocked) // the next holder took over the owner field
		return nil
	}
	h.BeginRelease()
	defer h.EndRelease()
	ctx, cancel := m.c.UnlockContext(lockCtx)
	defer cancel()
	lease, _ := h.Lease()
	// At most two rounds: one that may keep the lock for a local waiter, and,
	// if that waiter cannot take it after all, one that lets it go.
	for mayKeep := local; ; mayKeep = false {
		var next *localWaiter
		var sw *mux.Waiter
		var place successorPlace
		if mayKeep {
			if next = m.t.successor(m.name, h); next == nil && mode != releaseInRedis {
				next = m.t.reserve(m, h)
			}
			sw, place = m.successorWait(h, next)
		}
		t := h.Send(lease)
		var r releaseReply
		err := core.RetryTransient(ctx, func() (err error) {
			r, err = releaseScript(ctx, m.c, m.keys, h.Owner, req, lease, place, h.LateAttempts)
			m.c.NoteError(err)
			return err
		})
		if sw != nil {
			m.placeSuccessor(h, next, sw, place, r, t, err)
		}
		switch {
		case err != nil:
			m.t.dissolve(m.name, h)
			ae := h.Abandon("unlock", err, func(ctx context.Context) error {
				return abandonScript(ctx, m.c, m.keys, h.Owner, "-", lease, h.LateAttempts)
			})
			return m.wrap("unlock", ae)
		case r.kept && mayKeep:
			// No one else waits in Redis: the lock stayed ours for the
			// next local waiter. Pass it on; if that fails (it left, say),
			// let the lock go in a second round.
			h.Extend(t, lease)
			if m.t.keep(m.name, h, next, r.first, r.last) && m.t.passOn(m.name, h) {
				h.End(ErrUnlocked)
				return nil
			}
			m.t.dissolve(m.name, h)
			req = newRequest(m.c)
			continue
		case r.kept:
			return m.wrap("unlock", fmt.Errorf("unexpected reply: lock kept without a successor"))
		case r.left < 0:
			h.End(ErrLeaseLost)
			return m.notHeld(ErrLeaseLost)
		case r.left == 0:
			h.End(ErrUnlocked)
			if local {
				m.t.noteReleased(m.name)
			}
		default:
			h.SetCount(r.left)
			h.Extend(t, lease)
		}
		return nil
	}
}

// successorWait prepares the release of h to queue next, the Client's next
// leader (a waiting goroutine, or a place reserved for an expected Lock), in
// Redis: a new owner id (and secret) and a Waiter on the lock's channel
// tagged with it before the release runs, so the hand-off message cannot
// arrive unheard. Only a live subscription will do, so that Unlock never
// waits for pub/sub (a reconnect, say). Without a successor or a live
// subscription h's cohort ends here, and the oldest waiter queues by itself.
func (m *Mutex) successorWait(h *core.Hold, next *localWaiter) (*mux.Waiter, successorPlace) {
	if next != nil {
		if w := m.c.Mux.SubscribeIfLive(m.keys.grants, 1); w != nil {
			owner, secret := m.c.NewID(), newSecret()
			w.SetTagKeeping(owner, keepHandOff(secret))
			return w, successorPlace{owner: owner, secret: secret, reserved: next.reservedBy != nil}
		}
	}
	m.t.dissolve(m.name, h)
	return nil, successorPlace{}
}

// placeSuccessor settles next, named the successor in a release of h that
// ended with r (or err): it is handed the place the release queued for it,
// or, when the lock was kept, stays a local waiter to be passed the lock; a
// place nobody takes up is given up, and when the release failed or found the
// hold lost, h's cohort ends and the oldest waiter queues by itself. A
// reserved place the release did not queue (no one else waited) is dropped.
func (m *Mutex) placeSuccessor(h *core.Hold, next *localWaiter, w *mux.Waiter, place successorPlace, r releaseReply, sent core.Ticket, err error) {
	wd := m.c.Cfg.WatchdogTimeout
	switch {
	case err == nil && r.kept:
		w.Leave(true)
	case err == nil && r.unqueued:
		m.t.dissolve(m.name, h)
		w.Leave(true)
	case err == nil && r.left == 0:
		retry := m.c.RetryAfter(r.granted)
		if r.granted == 0 {
			retry = 0
		}
		p := &promotion{w: w, owner: place.owner, secret: place.secret, queuedAt: sent, fence: r.fence, check: r.granted == 0,
			retryIn: min(retry, recheckCap(m.c))}
		if !m.t.promote(m, h, next, p) {
			w.Leave(true)
			abandon(m.c, m.keys, place.owner, place.secret, wd, false)
		}
	default:
		m.t.dissolve(m.name, h)
		w.Leave(true)
		if err != nil { // the script may have queued it
			abandon(m.c, m.keys, place.owner, place.secret, wd, true)
		}
	}
}

// handOn takes over a lock passed to a Lock call that is leaving, and unlocks
// it at once: it goes to the next local waiter or back to Redis. A release
// that fails gives the hold up (see release), so nothing is left behind
// that the error could report.
func (m *Mutex) handOn(p *cohortPass) {
	h := m.c.NewHold(mutexKind, m.name, m.keys.lock, p.owner, p.token, p.lease, true, func(error) {})
	h.SetCount(1)
	h.LateAttempts = p.late
	m.giveBackOnLapse(h)
	if !m.c.Register(h) {
		h.End(ErrUnlocked)
		m.t.abortTransit(m.name) // closing: the lock expires in Redis
		return
	}
	h.StartFrom(p.until, p.epoch)
	h.AwaitExtension(p.claim)
	m.t.adopt(m.name, h)
	_ = m.release(context.Background(), h, newRequest(m.c), releasePass)
}
