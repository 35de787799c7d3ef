package rlock

import "github.com/relockio/relock/internal/core"

// Reserved places: the turn of a Client whose goroutines lock again right
// after Unlock (a worker in a loop) ends with a release that hands the lock
// to the head of the Redis queue and, in the same script, queues a place for
// the Client's next Lock, which is expected but has not come yet. That Lock
// then takes the place instead of running a script of its own, and the
// grant to the head counts the place among the waiters behind it, so that the
// new holder knows another Client waits and takes a turn too: with only two
// worker processes, neither would learn it otherwise (each queues again one
// round trip after its release, after the grant was sent).
//
// The place is queued only behind other waiters (release.lua frees the lock
// when no one else is queued). A place no Lock takes within the linger is
// given up (abandon.lua, which passes the lock on if it was granted
// meanwhile), so a guess that misses costs one script.

// reserve names a placeholder leader as h's successor at the end of a turn
// in which the Client's goroutines took the lock kept for them (a parked
// lock, see park), or after a release in Redis that its next Lock followed
// within the linger (the way two workers start taking turns): one is likely
// to lock again at once. nil when turns are off, the hold formed no cohort,
// or a goroutine of the Client already waits (successor names it).
func (t *cohorts) reserve(m *Mutex, h *core.Hold) *localWaiter {
	if t.linger <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[m.name]
	if co == nil || !co.held || co.hold != h || co.leader != nil || len(co.waiters) > 0 {
		return nil
	}
	if st := t.relock[m.name]; co.unparked == 0 && (st == nil || !st.quick) {
		return nil
	}
	lw := &localWaiter{ready: make(chan struct{}), successor: true, reservedBy: m}
	lw.closed = true // no goroutine waits on it
	co.leader = lw
	co.refs++ // the placeholder's, until a Lock takes its place or it is dropped
	return lw
}

// holdReservation settles the placeholder l, whose place the release has
// queued (l.promo): a goroutine that came meanwhile takes it over at once;
// otherwise it waits for the Client's next Lock for up to the linger.
// Called with t.mu held.
func (t *cohorts) holdReservation(name string, co *cohort, l *localWaiter) {
	if len(co.waiters) > 0 {
		lw := co.waiters[0]
		lw.promo, l.promo = l.promo, nil
		co.leader = lw
		co.refs--
		lw.wake()
		return
	}
	co.reserveTimer = core.AfterFunc(t.linger, func() { t.expireReservation(name, l) })
}

// takeReservation gives lw, a Lock call joining the cohort, the place
// reserved for it, if one waits: lw becomes the leader with that place.
// Called with t.mu held.
func (t *cohorts) takeReservation(co *cohort, lw *localWaiter) bool {
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

// expireReservation gives up a reserved place no Lock took in time.
func (t *cohorts) expireReservation(name string, l *localWaiter) {
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
func (t *cohorts) dropReservation(name string, co *cohort, l *localWaiter) {
	if co.reserveTimer != nil {
		co.reserveTimer.Stop()
		co.reserveTimer = nil
	}
	p, m := l.promo, l.reservedBy
	l.promo = nil
	co.leader = nil
	co.refs--
	co.settle()
	t.put(name, co)
	p.w.Leave(true)
	abandon(m.c, m.keys, p.owner, p.secret, m.c.Cfg.WatchdogTimeout, false)
}
