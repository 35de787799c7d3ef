package core

import "time"

// relockStat is what the Client learned of how soon its goroutines take a
// lock again after its last release, so that it lingers only where that pays.
type relockStat struct {
	missed   bool      // the last linger ran out unused: do not park
	released time.Time // a final release let the lock go (in Redis) then
	// quick: the Client's last acquisition came within the linger of its
	// last release in Redis (see Reserve).
	quick bool
	// gap estimates how soon the Client's next acquisition comes after its
	// last release (see NoteRelockGap): a park lingers a few times that.
	gap time.Duration
}

// maxRelockStats bounds Turns.relock: past it the map is cleared (it is only
// a hint).
const maxRelockStats = 4096

// Park keeps the lock held by h, at its last release, for the next
// acquisition of a goroutine of this Client for up to the linger (as long as
// the Client's recent relock gaps call for, at most the configured linger:
// see TurnLinger), and never past the point where too little of its lease is
// left to pass it on (nothing renews a parked lock): a worker that locks
// again right away takes it without a round trip, so the cross-process
// hand-off is paid once per turn instead of once per hold. It parks only
// where waiting costs others little and may pay: other Clients wait in Redis
// (else the release frees the lock for anyone at once), no goroutine of this
// Client waits (PassOn serves those), the turn's budget allows another pass
// (canPass), the hold could be passed on (newPass), the Client is not
// closing (Close gives back what is parked), and the last linger for this
// lock did not run out unused, unless an acquisition has come within the
// linger of a release since. It reports whether it parked: h is then the
// caller's to end. When the linger runs out, k gives the lock back in Redis.
func (t *Turns) Park(k TurnLock, h *Hold) bool {
	linger := t.Linger()
	if linger <= 0 {
		return false
	}
	name := k.TurnName()
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	now := time.Now()
	if co == nil || co.hold != h || !co.contended || len(co.waiters) > 0 || co.parked != nil || !co.canPass(now) || t.c.IsClosed() {
		return false
	}
	st := t.relock[name]
	if st != nil && st.missed {
		st.released = now
		return false
	}
	p := co.newPass(h, now)
	if p == nil {
		return false
	}
	var gap time.Duration
	if st != nil {
		gap = st.gap
	}
	co.parked, co.parkedBy, co.parkedAt = p, k, now
	d := min(TurnLinger(linger, gap), p.Until.Sub(now)-p.margin())
	co.parkTimer = t.after(d, func() { t.expire(k, p) })
	return true
}

// Unpark hands the lock parked for this Client (see Park) to an
// acquisition; nil when none is parked (or its linger is running out: expire
// gives it back). A parked lock that was put in doubt meanwhile (a message to
// its owner field, a connection error) or whose lease ran low is given back
// instead.
func (t *Turns) Unpark(k TurnLock) *Pass {
	name := k.TurnName()
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || co.parked == nil || !co.parkTimer.Stop() {
		if st := t.relock[name]; st != nil {
			since := time.Since(st.released)
			if st.quick = since < t.Linger(); st.quick && st.missed {
				// A linger as long as this gap would have paid: learn it
				// (once: the first acquisition after the miss), and linger
				// again.
				st.missed, st.gap = false, NoteRelockGap(st.gap, since)
			}
		}
		return nil
	}
	p := co.parked
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	co.unparked++
	st := t.stat(name)
	now := time.Now()
	*st = relockStat{gap: NoteRelockGap(st.gap, now.Sub(co.parkedAt))}
	if !co.quiet() || p.Epoch != t.c.Epoch() || p.Until.Sub(now) < p.margin() {
		t.releaseParked(k, co, p)
		return nil
	}
	return p
}

// NoteReleased records that a final release of this Client let the lock go
// in Redis (see relockStat).
func (t *Turns) NoteReleased(name string) {
	if t.Linger() <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stat(name).released = time.Now()
}

// stat is the relockStat of a lock, made if missing. Called with t.mu held.
func (t *Turns) stat(name string) *relockStat {
	st := t.relock[name]
	if st == nil {
		if len(t.relock) >= maxRelockStats {
			clear(t.relock)
		}
		st = &relockStat{}
		t.relock[name] = st
	}
	return st
}

// expire gives back a parked lock whose linger ran out unused.
func (t *Turns) expire(k TurnLock, p *Pass) {
	name := k.TurnName()
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || co.parked != p {
		return
	}
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	// The release that parked it is the one an acquisition may still come
	// quickly after (see Unpark).
	st := t.stat(name)
	*st = relockStat{missed: true, released: co.parkedAt, gap: st.gap}
	t.releaseParked(k, co, p)
}

// flush gives back every parked lock at once, and every reserved place (the
// Client is closing).
func (t *Turns) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, co := range t.m {
		if co.parked != nil && co.parkTimer.Stop() {
			p, k := co.parked, co.parkedBy
			co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
			t.releaseParked(k, co, p)
		}
		if l := co.leader; l != nil && l.reservedBy != nil && l.promo != nil {
			t.dropReservation(name, co, l)
		}
	}
}

// releaseParked ends co's turn and gives the parked lock p back in Redis, in
// the background: it goes to the head waiter (a goroutine of this Client that
// came meanwhile queues there as the new leader). Called with t.mu held.
func (t *Turns) releaseParked(k TurnLock, co *cohort, p *Pass) {
	t.dissolveLocked(k.TurnName(), co, nil)
	k.GiveBack(p)
}
