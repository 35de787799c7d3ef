package rlock

import (
	"strconv"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// Lock cohorting: the goroutines of one Client that wait for a lock queue in
// Redis as one. The oldest of them, the leader, waits there for the Client;
// the others wait in the Client, in arrival order. A goroutine that holds the
// lock and unlocks it while others of its Client wait passes the lock to the
// oldest of them without releasing it in Redis: the new holder takes over the
// owner field (and with it the lease and the watchdog's renewals) and the next
// of a block of fencing tokens that the Redis acquisition reserved, so tokens
// still rise strictly from holder to holder, across processes too. A local
// hand-off costs no round trip at all.
//
// Fairness across processes is kept by a budget per turn: cohortPasses local
// hand-offs (within cohortSpan of the Redis acquisition, a cap for long
// critical sections), or, when holds are short, as many as fit in
// cohortBurst, up to cohortMaxPasses. A turn thus lasts a few holds or a
// couple of milliseconds, whichever is longer, so short critical sections pay
// a cross-process hand-off per few dozen holds, not per few. Then the holder
// releases the lock in Redis, which hands it to the head of the Redis queue,
// and in the same script queues the oldest local waiter at the tail, as the
// Client's next leader: each Client with waiters gets one turn in Redis's
// arrival order. When no one else is queued in Redis, the same script keeps
// the lock for the Client and reserves new tokens instead, so an uncontested
// Client pays one script per turn.
//
// Only holds with the watchdog's lease take part: a WithLease hold keeps its
// own fixed lease, which a hand-off could not honour.
//
// A local pass costs no round trip, so it cannot ask Redis whether the lock is
// still ours; it refuses whenever the Client knows or suspects otherwise, and
// the release then goes through Redis, which settles it. A pass is made only
// while the hold is confirmed (no connection error seen since the command
// that last confirmed it was sent: a restart, a lost reply), the lock's
// channel has stayed subscribed since before the acquisition, and no message
// addressed to the owner field arrived (ForceUnlock sends one). What remains
// is the time a ForceUnlock message, or the loss of the connection, takes to
// reach the Client: a pass made in that window gives the next goroutine a
// token below the new holder's (see the package documentation).
const (
	cohortPasses    = 8
	cohortSpan      = time.Second
	cohortBurst     = 2 * time.Millisecond
	cohortMaxPasses = 64
	// tokenBlock fencing tokens are reserved by a contended acquisition: one
	// for the holder and one per possible local hand-off.
	tokenBlock = cohortMaxPasses + 1
)

var tokenBlockArg = strconv.Itoa(tokenBlock)

// cohorts is the cohorting state of one Client's locks, by lock name.
type cohorts struct {
	mu     sync.Mutex
	m      map[string]*cohort
	linger time.Duration          // see WithLinger; 0: never park
	relock map[string]*relockStat // see park
}

// relockStat is what the Client learned of how soon its goroutines lock a
// lock again after its last Unlock, so that it lingers only where that pays.
type relockStat struct {
	missed   bool      // the last linger ran out unused: do not park
	released time.Time // a final Unlock released in Redis then
	// quick: the Client's last Lock came within the linger of its last
	// release in Redis (see reserve).
	quick bool
	// gap estimates how soon the Client's next Lock comes after its last
	// Unlock (see core.NoteRelockGap): a park lingers a few times that.
	gap time.Duration
}

// maxRelockStats bounds cohorts.relock: past it the map is cleared (it is only
// a hint).
const maxRelockStats = 4096

func newCohorts(linger time.Duration) *cohorts {
	return &cohorts{m: make(map[string]*cohort), linger: linger, relock: make(map[string]*relockStat)}
}

// cohort is one lock's state in one Client. Guarded by cohorts.mu.
//
// Liveness rests on one invariant, restored by settle after every change:
// while goroutines wait, the Client either holds the lock (and passes it on
// or names a successor when it releases it) or has a leader waiting in Redis.
type cohort struct {
	refs    int  // waiters joined, plus one while held
	held    bool // a hold of this Client owns the lock and may pass it on
	hold    *core.Hold
	next    uint64 // next..last: fencing tokens left to pass on
	last    uint64
	passed  int            // local hand-offs in this turn
	since   time.Time      // start of this turn
	waiters []*localWaiter // arrival order
	leader  *localWaiter   // waits in Redis for the Client, or is about to
	// watch hears messages addressed to the owner field while held (tagged
	// with it, deaf to wake-up budgets): one from ForceUnlock, or a wake
	// after a reconnect, means the hold may be gone.
	watch *mux.Waiter
	// contended: waiters of other Clients were queued in Redis when this
	// Client took the lock (see park).
	contended bool
	// parked is the lock kept, after its last Unlock, for the next Lock of
	// this Client until parkTimer fires (see park); parkedBy is its Mutex.
	parked    *cohortPass
	parkTimer core.Timer
	parkedBy  *Mutex
	parkedAt  time.Time
	// unparked counts the Lock calls of this turn that took a parked lock:
	// the Client's goroutines lock again right after Unlock (see reserve).
	unparked int
	// reserveTimer gives up a reserved place no Lock took (see reserve).
	reserveTimer core.Timer
}

// localWaiter is one waiting Lock call, as the cohort sees it.
type localWaiter struct {
	ready  chan struct{} // closed when passed the lock or made the leader
	closed bool
	w      *mux.Waiter // its Redis-side wait, if it has one
	pass   *cohortPass
	// successor marks a leader chosen by a releasing holder, which is
	// queueing it in Redis (or keeping the lock for it); promo is what the
	// holder did for it then.
	successor bool
	promo     *promotion
	// reservedBy marks a placeholder leader standing for a Lock call the
	// Client expects (see reserve): no goroutine waits behind it yet.
	reservedBy *Mutex
}

// cohortPass is a lock passed on locally: what the new hold takes over.
type cohortPass struct {
	owner string
	token uint64
	lease time.Duration
	until time.Time
	epoch uint64 // Client epoch of the command that last confirmed the hold
	late  bool   // see core.Hold.LateAttempts
	// claim: the lease in Redis is still the claim window of a hand-off,
	// which the new hold extends (see core.Hold.AwaitExtension); 0: none.
	claim time.Duration
	at    time.Time // when it was passed (for the hand-off latency)
}

// promotion is a place in the Redis queue taken for a local waiter by the
// release that ended its Client's turn: the owner id it is queued under, a
// Waiter subscribed and tagged with it (so that the hand-off message cannot
// be missed), and what the attempt-based wait needs to know (see acquisition).
type promotion struct {
	w        *mux.Waiter
	owner    string
	secret   string
	queuedAt core.Ticket
	fence    uint64
	retryIn  time.Duration
	check    bool // ask Redis at once: the release handed the lock to no one
}

func (lw *localWaiter) wake() {
	if !lw.closed {
		lw.closed = true
		close(lw.ready)
	}
	if lw.w != nil {
		lw.w.Notify()
	}
}

func (co *cohort) canPass(now time.Time) bool {
	if !co.held || co.next > co.last {
		return false
	}
	age := now.Sub(co.since)
	return co.passed < cohortPasses && age < cohortSpan || co.passed < cohortMaxPasses && age < cohortBurst
}

// settle makes the oldest waiter the leader when the Client neither holds
// the lock nor has one; it wakes up to queue in Redis.
func (co *cohort) settle() {
	if !co.held && co.leader == nil && len(co.waiters) > 0 {
		co.leader = co.waiters[0]
		co.leader.wake()
	}
}

func (t *cohorts) get(name string) *cohort {
	co := t.m[name]
	if co == nil {
		co = &cohort{}
		t.m[name] = co
	}
	return co
}

func (t *cohorts) put(name string, co *cohort) {
	if co.refs == 0 && t.m[name] == co {
		delete(t.m, name)
	}
}

// active reports whether goroutines of this Client hold or wait for the lock.
func (t *cohorts) active(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[name] != nil
}

// join registers a waiting Lock call. lead reports that it is the Client's
// leader and queues in Redis; otherwise it waits for lw.ready: a pass, or
// being made the leader (with a promotion, or to queue by itself).
func (t *cohorts) join(name string) (lw *localWaiter, lead bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	co.refs++
	lw = &localWaiter{ready: make(chan struct{})}
	co.waiters = append(co.waiters, lw)
	if t.takeReservation(co, lw) {
		return lw, false
	}
	if !co.held && co.leader == nil {
		co.leader = lw
		lw.closed = true
		close(lw.ready)
		return lw, true
	}
	return lw, false
}

// leave ends a waiting Lock call. It returns the lock if it was passed to the
// call but not taken, which the caller must pass on (see Mutex.handOn), and a
// promotion not taken up, whose place in Redis the caller must give up.
func (t *cohorts) leave(name string, lw *localWaiter) (*cohortPass, *promotion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil {
		return nil, nil // cannot happen: joined waiters keep it
	}
	for i, x := range co.waiters {
		if x == lw {
			co.waiters = append(co.waiters[:i], co.waiters[i+1:]...)
			break
		}
	}
	if co.leader == lw {
		co.leader = nil
	}
	lw.successor = false
	p, promo := lw.pass, lw.promo
	lw.pass, lw.promo = nil, nil
	co.refs--
	co.settle()
	t.put(name, co)
	return p, promo
}

// take returns the lock passed to lw, if any, and records w, the Redis-side
// wait of lw, so that a later pass wakes it.
func (t *cohorts) take(lw *localWaiter, w *mux.Waiter) *cohortPass {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.pass
	lw.pass = nil
	if w != nil {
		lw.w = w
	}
	return p
}

// takePromotion returns the place queued for lw by a release, if any.
func (t *cohorts) takePromotion(lw *localWaiter) *promotion {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.promo
	lw.promo = nil
	return p
}

// form records h, just acquired in Redis with tokens token..last by the Lock
// call of lw (nil if it had none), as the Client's holder of the lock, free to
// pass it on while the budget lasts. The cohort takes watch (see cohort.watch).
// contended says whether other waiters were queued in Redis then.
func (t *cohorts) form(name string, h *core.Hold, last uint64, lw *localWaiter, watch *mux.Waiter, contended bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	if !co.held {
		co.refs++
	}
	if co.watch != nil {
		co.watch.Leave(true)
	}
	co.watch = watch
	if lw != nil && co.leader == lw {
		co.leader = nil
	}
	co.held, co.hold = true, h
	co.next, co.last = h.Token+1, last
	co.passed, co.since, co.unparked = 0, time.Now(), 0
	co.contended = contended
}

// adopt records h, built from a pass, as the Client's holder of the lock.
func (t *cohorts) adopt(name string, h *core.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil && co.held && co.hold == nil {
		co.hold = h
	}
}

// abortTransit ends local passing when a pass in transit could not become a
// hold (the Client is closing): the lock is left to expire in Redis.
func (t *cohorts) abortTransit(name string) {
	t.mu.Lock()
	co := t.m[name]
	t.mu.Unlock()
	if co != nil {
		t.dissolve(name, nil)
	}
}

// passOn hands the lock held by h to the oldest local waiter, if the budget
// allows; h must be at its last hold level. It reports whether it did: h is
// then the caller's to end, and nothing is to be done in Redis.
func (t *cohorts) passOn(name string, h *core.Hold) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || co.hold != h || len(co.waiters) == 0 || !co.canPass(time.Now()) {
		return false
	}
	p := co.newPass(h)
	if p == nil {
		return false
	}
	lw := co.waiters[0]
	co.waiters = co.waiters[1:]
	if co.leader == lw {
		co.leader = nil
	}
	lw.pass = p
	lw.wake()
	return true
}

// newPass takes the lock from h, at its last hold level, for a goroutine of
// this Client, when nothing the Client knows puts the hold in doubt and
// enough of its lease is left; nil otherwise. The lock is in transit until a
// new hold adopts it.
func (co *cohort) newPass(h *core.Hold) *cohortPass {
	if !co.trusted(h) {
		return nil
	}
	lease, renewed := h.Lease()
	until := h.ValidUntil()
	confirmed, epoch := h.Confirmed()
	// A hold still in its claim window passes it on with the extension due,
	// while a third of the window is left for that extension to land.
	claim := h.Claim()
	need := lease / 2
	if claim > 0 {
		need = claim / 3
	}
	if !renewed || !confirmed || time.Until(until) < need {
		return nil
	}
	p := &cohortPass{owner: h.Owner, token: co.next, lease: lease, until: until, epoch: epoch, late: h.LateAttempts, claim: claim, at: time.Now()}
	co.next++
	co.passed++
	co.hold = nil // in transit: adopt sets the new hold
	return p
}

// park keeps the lock held by h, at its last Unlock, for the next Lock of a
// goroutine of this Client for up to the linger (turns; as long as the
// Client's recent relock gaps call for, at most WithLinger's: see
// core.TurnLinger): a worker that locks
// again right away takes it without a round trip, so the cross-process
// hand-off is paid once per turn instead of once per hold. It parks only
// where waiting costs others little and may pay: other Clients wait in Redis
// (else the release frees the lock for anyone at once), no goroutine of this
// Client waits (passOn serves those), the turn's budget allows another pass
// (canPass), the hold could be passed on (newPass), and the last linger for
// this lock did not run out unused, unless a Lock has come within the linger
// of a release since. It reports whether it parked: h is then the caller's to
// end. When the linger runs out, the lock is released in Redis (expire).
func (t *cohorts) park(m *Mutex, h *core.Hold) bool {
	if t.linger <= 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[m.name]
	now := time.Now()
	if co == nil || co.hold != h || !co.contended || len(co.waiters) > 0 || co.parked != nil || !co.canPass(now) {
		return false
	}
	st := t.relock[m.name]
	if st != nil && st.missed {
		st.released = now
		return false
	}
	p := co.newPass(h)
	if p == nil {
		return false
	}
	var gap time.Duration
	if st != nil {
		gap = st.gap
	}
	co.parked, co.parkedBy, co.parkedAt = p, m, now
	co.parkTimer = core.AfterFunc(core.TurnLinger(t.linger, gap), func() { t.expire(m, p) })
	return true
}

// unpark hands the lock parked for this Client (see park) to a Lock call; nil
// when none is parked (or its linger is running out: expire releases it).
// A parked lock whose hold was put in doubt meanwhile is released instead.
func (t *cohorts) unpark(m *Mutex) *cohortPass {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[m.name]
	if co == nil || co.parked == nil || !co.parkTimer.Stop() {
		if st := t.relock[m.name]; st != nil {
			since := time.Since(st.released)
			if st.quick = since < t.linger; st.quick && st.missed {
				// A linger as long as this gap would have paid: learn it
				// (once: the first Lock after the miss), and linger again.
				st.missed, st.gap = false, core.NoteRelockGap(st.gap, since)
			}
		}
		return nil
	}
	p := co.parked
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	co.unparked++
	st := t.stat(m.name)
	*st = relockStat{gap: core.NoteRelockGap(st.gap, time.Since(co.parkedAt))}
	if !co.quiet() {
		t.releaseParked(m, co, p)
		return nil
	}
	return p
}

// noteReleased records that a final Unlock of this Client released the lock
// in Redis (see relockStat).
func (t *cohorts) noteReleased(name string) {
	if t.linger <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stat(name).released = time.Now()
}

// stat is the relockStat of a lock, made if missing. Called with t.mu held.
func (t *cohorts) stat(name string) *relockStat {
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

// expire releases a parked lock whose linger ran out unused.
func (t *cohorts) expire(m *Mutex, p *cohortPass) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[m.name]
	if co == nil || co.parked != p {
		return
	}
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	// The Unlock that parked it is the release a Lock may still come
	// quickly after (see unpark).
	st := t.stat(m.name)
	*st = relockStat{missed: true, released: co.parkedAt, gap: st.gap}
	t.releaseParked(m, co, p)
}

// flush releases every parked lock at once (the Client is closing).
func (t *cohorts) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, co := range t.m {
		if co.parked != nil && co.parkTimer.Stop() {
			p, m := co.parked, co.parkedBy
			co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
			t.releaseParked(m, co, p)
		}
		if l := co.leader; l != nil && l.reservedBy != nil && l.promo != nil {
			t.dropReservation(name, co, l)
		}
	}
}

// releaseParked ends co's turn and releases the parked lock p in Redis, in the
// background: it goes to the head waiter (one of this Client's goroutines
// that came meanwhile queues there as the new leader). A release that fails
// leaves the lock to expire with its lease, as a Client that died would.
// Called with t.mu held.
func (t *cohorts) releaseParked(m *Mutex, co *cohort, p *cohortPass) {
	t.dissolveLocked(m.name, co, nil)
	abandon(m.c, m.keys, p.owner, "-", p.lease, p.late)
}

// trusted reports whether nothing the Client heard puts h's hold in doubt:
// its watch is live and got no message. A message (anyone may publish one)
// only sends the release through Redis, which confirms or refutes the hold.
func (co *cohort) trusted(h *core.Hold) bool {
	if co.watch == nil || !co.watch.Live() {
		return false
	}
	if co.heard() {
		h.Doubt()
		return false
	}
	return true
}

// quiet is trusted for a lock in transit (no hold to doubt).
func (co *cohort) quiet() bool {
	return co.watch != nil && co.watch.Live() && !co.heard()
}

// heard reports whether a message came for the owner field.
func (co *cohort) heard() bool {
	select {
	case <-co.watch.C():
		return true
	default:
		return false
	}
}

// successor picks the oldest local waiter as the Client's next leader when h,
// which is releasing the lock in Redis, can name it there (see release.lua);
// nil when none waits (or one already waits in Redis).
func (t *cohorts) successor(name string, h *core.Hold) *localWaiter {
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

// promote hands lw the place the release of h queued for it and ends h's
// cohort. It reports false when lw is no longer the successor (it left, or the
// hold ended meanwhile and it queues by itself): the caller gives the place up.
func (t *cohorts) promote(m *Mutex, h *core.Hold, lw *localWaiter, p *promotion) bool {
	name := m.name
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

// keep renews h's cohort after the release script kept the lock for it (no
// one else was queued) with tokens first..last, and ends the successor's
// election: the lock is passed on locally instead. It reports false when h's
// cohort ended meanwhile.
func (t *cohorts) keep(name string, h *core.Hold, lw *localWaiter, first, last uint64) bool {
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

// dissolve ends local passing of the lock held by h (its final release is
// under way, or it ended otherwise); a successor being elected is dropped and
// the oldest waiter queues in Redis by itself.
func (t *cohorts) dissolve(name string, h *core.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil {
		t.dissolveLocked(name, co, h)
	}
}

func (t *cohorts) dissolveLocked(name string, co *cohort, h *core.Hold) {
	if !co.held || co.hold != h {
		return
	}
	co.held, co.hold = false, nil
	if co.watch != nil {
		co.watch.Leave(true)
		co.watch = nil
	}
	co.refs--
	if l := co.leader; l != nil && l.successor {
		l.successor = false
		co.leader = nil
		if l.reservedBy != nil {
			co.refs--
		}
	}
	co.settle()
	t.put(name, co)
}
