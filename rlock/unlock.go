package rlock

import (
	"context"
	"fmt"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
)

// Unlock releases one level of the hold carried by lockCtx. The final level
// gives the lock to the next waiter: a goroutine of this Client while the
// Client's turn lasts (no round trip), else the head of the Redis queue, told
// by one message; with no one waiting the lock is deleted and announced. It
// stops renewals and cancels lockCtx with cause ErrUnlocked.
//
// Unlock works even when lockCtx is cancelled; it retries connection errors for
// up to the unlock timeout with an idempotent request, so a retried release never
// counts twice. It fails with ErrNotHeld when lockCtx does not hold the lock (it
// never did, it was already fully unlocked, or the lease was lost: then the
// error also matches ErrLeaseLost); Redis is left unchanged then.
func (m *Mutex) Unlock(lockCtx context.Context) error {
	if m.err != nil {
		return m.err
	}
	h := m.holdOf(lockCtx)
	if h == nil {
		return fmt.Errorf("%w: the context holds no lock %q", ErrNotHeld, m.name)
	}
	return m.release(lockCtx, h, m.c.NewID())
}

func (m *Mutex) release(lockCtx context.Context, h *core.Hold, requestID string) error {
	h.Serial.Lock()
	defer h.Serial.Unlock()
	if ended, cause := h.State(); ended {
		return m.notHeld(cause)
	}
	n, releasing := h.Count()
	final := n == 1 && !releasing
	if final && m.t.passOn(m.name, h) {
		h.End(ErrUnlocked) // the next holder took over the owner field
		return nil
	}
	h.BeginRelease()
	defer h.EndRelease()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(lockCtx), m.c.Cfg.UnlockTimeout)
	defer cancel()
	lease, _ := h.Lease()
	for {
		var next *localWaiter
		var sw *pubsub.Waiter
		var successor string
		if final {
			next = m.t.successor(m.name, h)
			sw, successor = m.successorWait(h, next)
		}
		var r releaseReply
		sentAt := h.Send(lease)
		err := core.RetryTransient(ctx, func() (err error) {
			r, err = releaseScript(ctx, m.c, m.keys, h.Owner, requestID, lease, successor)
			return err
		})
		if sw != nil {
			m.placeSuccessor(h, next, sw, successor, r, sentAt, err)
		}
		switch {
		case err != nil:
			return m.wrap("unlock", err)
		case r.kept:
			// No one else waits in Redis: the lock stayed ours for the
			// next local waiter. Pass it on (or, if it left, release it).
			h.Extend(sentAt, lease)
			if m.t.keep(m.name, h, next, r.first, r.last) && m.t.passOn(m.name, h) {
				h.End(ErrUnlocked)
				return nil
			}
			requestID = m.c.NewID()
			continue
		case r.left < 0:
			h.End(ErrLeaseLost)
			return m.notHeld(ErrLeaseLost)
		case r.left == 0:
			h.End(ErrUnlocked)
		default:
			h.SetCount(r.left)
			h.Extend(sentAt, lease)
		}
		return nil
	}
}

// successorWait prepares the release of h to queue next, the Client's next
// leader, in Redis: a new owner id and a Waiter on the lock's channel tagged
// with it before the release runs, so the hand-off message cannot arrive
// unheard. Only a live subscription will do, so that Unlock never waits for
// pub/sub (a reconnect, say). Without a successor or a live subscription h's
// cohort ends here, and the oldest waiter queues by itself.
func (m *Mutex) successorWait(h *core.Hold, next *localWaiter) (*pubsub.Waiter, string) {
	if next != nil {
		if w := m.c.Mux.SubscribeIfLive(m.keys.channel, 1); w != nil {
			owner := m.c.NewID()
			w.SetTag(owner)
			return w, owner
		}
	}
	m.t.dissolve(m.name, h)
	return nil, ""
}

// placeSuccessor settles next, named the successor in a release of h that
// ended with r (or err): it is handed the place the release queued for it,
// or, when the lock was kept, stays a local waiter to be passed the lock; a
// place nobody takes up is given up, and when the release failed or found the
// hold lost, h's cohort ends and the oldest waiter queues by itself.
func (m *Mutex) placeSuccessor(h *core.Hold, next *localWaiter, w *pubsub.Waiter, owner string, r releaseReply, sentAt core.Ticket, err error) {
	switch {
	case err == nil && r.kept:
		w.Leave(true)
	case err == nil && r.left == 0:
		retry := m.c.RetryAfter(r.granted)
		if r.granted == 0 {
			retry = 0
		}
		p := &promotion{w: w, owner: owner, queuedAt: sentAt, fence: r.fence, check: r.granted == 0,
			retryIn: min(retry, m.c.Cfg.WatchdogTimeout*4/5)}
		if !m.t.promote(m.name, h, next, p) {
			w.Leave(false)
			abandon(m.c, m.keys, owner, m.c.Cfg.WatchdogTimeout.Milliseconds(), false)
		}
	default:
		m.t.dissolve(m.name, h)
		w.Leave(false)
		if err != nil { // the script may have queued it
			abandon(m.c, m.keys, owner, m.c.Cfg.WatchdogTimeout.Milliseconds(), false)
		}
	}
}

// handOn takes over a lock passed to a Lock call that is leaving, and unlocks
// it at once: it goes to the next local waiter or back to Redis.
func (m *Mutex) handOn(p *cohortPass) {
	h := m.c.NewHold(mutexKind, m.keys.lock, p.owner, p.token, p.lease, true, func(error) {})
	h.SetCount(1)
	if !m.c.Register(h) {
		h.End(ErrUnlocked)
		m.t.abortTransit(m.name) // closing: the lock expires in Redis
		return
	}
	h.StartFrom(p.until, p.epoch)
	m.t.adopt(m.name, h)
	_ = m.release(context.Background(), h, m.c.NewID())
}
