package core

import (
	"time"

	"github.com/relockio/relock/internal/mux"
)

// Succession is the part of a final release that names the Client's next
// leader in Redis (see Successor and Reserve), the same for every kind whose
// release script can queue it: the kind runs its script with the place
// (Owner, Secret, Reserved) and settles the outcome with Settle, or, when
// the script kept the lock for a waiting goroutine, with PassKept.
type Succession struct {
	t    *Turns
	k    Reserver
	h    *Hold
	next *TurnWaiter
	// w hears the grant to the place: subscribed and tagged with Owner
	// before the release runs, so that it cannot arrive unheard.
	w          *mux.Waiter
	recheckCap time.Duration

	Owner, Secret string
	Reserved      bool // a place for an acquisition the Client expects
}

// SuccessionReply is what the release script did with the place.
type SuccessionReply struct {
	Kept     bool // no one else was queued: the lock stays with the hold
	Unqueued bool // a reserved place was not queued, as no one else was
	Queued   bool // queued behind the waiters served
	// Place is what a grant to the queued place names, as the kind's
	// Protocol.Parse checks it (the Mutex: the fencing counter after the
	// hand-off; the semaphore: the place's arrival number).
	Place uint64
	// Granted is how long the head was granted the lock for (ms); 0 when
	// no one was: the successor re-checks at once.
	Granted int64
}

// Succeed names the successor of h, whose final release is about to run in
// Redis: the oldest local waiter, or, with reserve, a place for the Client's
// next acquisition (see Reserve). It prepares the place: a new owner id and
// secret, and a Waiter on the Client's grant channel tagged with it, whose
// messages keep (made from the secret) ranks. Only a live subscription will
// do, so that a release never waits for pub/sub (a reconnect, say). Without
// a successor or a live subscription h's turn ends here, the oldest waiter
// queues by itself, and Succeed returns nil.
func (t *Turns) Succeed(k Reserver, h *Hold, reserve bool, channel string, recheckCap time.Duration,
	keep func(secret string) func(held, next string) bool) *Succession {
	name := k.TurnName()
	next := t.Successor(name, h)
	if next == nil && reserve {
		next = t.Reserve(k, h)
	}
	if next != nil {
		if w := t.c.Mux.SubscribeIfLive(channel, 1); w != nil {
			owner, secret := t.c.NewID(), NewSecret()
			w.SetTagKeeping(owner, keep(secret))
			return &Succession{t: t, k: k, h: h, next: next, w: w, recheckCap: recheckCap,
				Owner: owner, Secret: secret, Reserved: next.Reserved()}
		}
	}
	t.Dissolve(name, h)
	return nil
}

// Settle settles the successor after the release that ran, sent at sent,
// ended with r (or err): it is handed the place the release queued for it,
// or, when the lock was kept, stays a local waiter for PassKept; a place
// nobody takes up is given up, and when the release failed or found the
// hold lost, the turn ends and the oldest waiter queues by itself. A
// reserved place the release did not queue (no one else waited) is dropped.
func (s *Succession) Settle(r SuccessionReply, sent Ticket, err error) {
	t, name := s.t, s.k.TurnName()
	switch {
	case err == nil && r.Kept:
		s.w.Leave(true)
	case err == nil && r.Queued:
		var retry time.Duration
		if r.Granted > 0 {
			retry = t.c.RetryAfter(r.Granted)
		}
		p := &Promotion{W: s.w, Owner: s.Owner, Secret: s.Secret, QueuedAt: sent, Fence: r.Place, Check: r.Granted == 0,
			RetryIn: min(retry, s.recheckCap)}
		if !t.Promote(name, s.h, s.next, p) {
			s.w.Leave(true)
			s.k.GiveUpPlace(p, false)
		}
	default: // unqueued, not held, or failed
		t.Dissolve(name, s.h)
		s.w.Leave(true)
		if err != nil { // the script may have queued it, or may still
			s.k.GiveUpPlace(&Promotion{Owner: s.Owner, Secret: s.Secret}, true)
		}
	}
}

// PassKept passes the lock, which the release kept for the successor as no
// one else was queued (its lease re-set by the command sent at sent, with
// the fencing tokens first..last reserved; NoTokens for a kind without
// them), on to it. It reports false when that failed (the waiter left, say):
// the turn has ended, and the caller lets the lock go in another round.
func (s *Succession) PassKept(sent Ticket, lease time.Duration, first, last uint64) bool {
	t, name := s.t, s.k.TurnName()
	s.h.Extend(sent, lease)
	if t.Keep(name, s.h, s.next, first, last) && t.PassOn(name, s.h) {
		return true
	}
	t.Dissolve(name, s.h)
	return false
}
