package core

import "time"

// Successors and reserved places, for a kind whose release script can queue
// the Client's next leader in Redis in the same step as it hands the lock to
// the head of the queue (a Mutex; see release.lua): the leader then need not
// queue by itself after the release, one round trip late.
//
// Reserved places: the turn of a Client whose goroutines lock again right
// after release (a worker in a loop) ends with a release that hands the lock
// to the head of the Redis queue and, in the same script, queues a place for
// the Client's next acquisition, which is expected but has not come yet.
// That acquisition then takes the place instead of running a script of its
// own, and the grant to the head counts the place among the waiters behind
// it, so that the new holder knows another Client waits and takes a turn
// too: with only two worker processes, neither would learn it otherwise
// (each queues again one round trip after its release, after the grant was
// sent). The place is queued only behind other waiters. A place no
// acquisition takes within the linger is given up (see Reserver.GiveUpPlace),
// so a guess that misses costs one script.

// Successor picks the oldest local waiter as the Client's next leader when
// h, which is releasing the lock in Redis, can name it there; nil when none
// waits (or one already waits in Redis).
func (t *Turns) Successor(name string, h *Hold) *TurnWaiter {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || !co.held || co.hold != h || co.leader != nil || len(co.waiters) == 0 {
		return nil
	}
	lw := co.waiters[0]
	co.leader, lw.successor = lw, true
	return lw
}

// Promote hands lw the place the release of h queued for it and ends h's
// turn. It reports false when lw is no longer the successor (it left, or the
// hold ended meanwhile and it queues by itself): the caller gives the place
// up.
func (t *Turns) Promote(name string, h *Hold, lw *TurnWaiter, p *Promotion) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil {
		return false
	}
	ok := lw.successor && co.leader == lw
	if ok {
		lw.successor, lw.promo = false, p
		if lw.reservedBy != nil {
			t.holdReservation(name, co, lw)
		} else {
			lw.wake()
		}
	}
	t.dissolveLocked(name, co, h)
	return ok
}

// Keep renews h's turn after the release script kept the lock for it (no
// one else was queued) with tokens first..last, and ends the successor's
// election: the lock is passed on locally instead. It reports false when h's
// turn ended meanwhile.
func (t *Turns) Keep(name string, h *Hold, lw *TurnWaiter, first, last uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if lw != nil && lw.successor {
		lw.successor = false
		if co != nil && co.leader == lw {
			co.leader = nil
			if lw.reservedBy != nil {
				co.refs--
			}
		}
	}
	if co == nil || !co.held || co.hold != h {
		if co != nil {
			co.settle()
		}
		return false
	}
	co.next, co.last = first, last
	co.passed, co.since = 0, time.Now()
	co.contended = false // no one else was queued
	return true
}

// Reserve names a placeholder leader as h's successor at the end of a turn
// in which the Client's goroutines took the lock kept for them (a parked
// lock, see Park), or after a release in Redis that its next acquisition
// followed within the linger (the way two workers start taking turns): one
// is likely to lock again at once. nil when turns are off, the hold formed
// no turn, or a goroutine of the Client already waits (Successor names it).
func (t *Turns) Reserve(k Reserver, h *Hold) *TurnWaiter {
	if t.Linger() <= 0 {
		return nil
	}
	name := k.TurnName()
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || t.c.IsClosed() || !co.held || co.hold != h || co.leader != nil || len(co.waiters) > 0 {
		return nil
	}
	if st := t.relock[name]; co.unparked == 0 && (st == nil || !st.quick) {
		return nil
	}
	lw := &TurnWaiter{ready: make(chan struct{}), successor: true, reservedBy: k}
	lw.closed = true // no goroutine waits on it
	co.leader = lw
	co.refs++ // the placeholder's, until an acquisition takes its place or it is dropped
	return lw
}

// holdReservation settles the placeholder l, whose place the release has
// queued (l.promo): a goroutine that came meanwhile takes it over at once;
// otherwise it waits for the Client's next acquisition for up to the linger.
// Called with t.mu held.
func (t *Turns) holdReservation(name string, co *cohort, l *TurnWaiter) {
	if len(co.waiters) > 0 {
		lw := co.waiters[0]
		lw.promo, l.promo = l.promo, nil
		co.leader = lw
		co.refs--
		lw.wake()
		return
	}
	if t.c.IsClosed() {
		t.dropReservation(name, co, l) // Close gave back the others already
		return
	}
	co.reserveTimer = t.after(t.Linger(), func() { t.expireReservation(name, l) })
}

// takeReservation gives lw, an acquisition joining the turn, the place
// reserved for it, if one waits: lw becomes the leader with that place.
// Called with t.mu held.
func (t *Turns) takeReservation(co *cohort, lw *TurnWaiter) bool {
	l := co.leader
	if l == nil || l.reservedBy == nil || l.promo == nil {
		return false // none, or its release is still running: lw waits for it
	}
	co.reserveTimer.Stop() // expireReservation finds it taken if it fires
	co.reserveTimer = nil
	lw.promo, l.promo = l.promo, nil
	co.leader = lw
	co.refs--
	lw.closed = true
	close(lw.ready)
	return true
}

// expireReservation gives up a reserved place no acquisition took in time.
func (t *Turns) expireReservation(name string, l *TurnWaiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil && co.leader == l && l.promo != nil {
		if st := t.relock[name]; st != nil {
			st.quick = false // the guess missed: do not repeat it
		}
		t.dropReservation(name, co, l)
	}
}

// dropReservation gives up the place reserved for l. Called with t.mu held.
func (t *Turns) dropReservation(name string, co *cohort, l *TurnWaiter) {
	if co.reserveTimer != nil {
		co.reserveTimer.Stop()
		co.reserveTimer = nil
	}
	p := l.promo
	l.promo = nil
	co.leader = nil
	co.refs--
	co.settle()
	t.put(name, co)
	if p.W != nil {
		p.W.Leave(true)
	}
	l.reservedBy.GiveUpPlace(p, false)
}
