package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/relockio/relock/internal/mux"
)

// Turns: the goroutines of one Client that wait for one lock (a Mutex, a
// one-permit semaphore) queue in Redis as one. The oldest of them, the
// leader, waits there for the Client; the others wait in the Client, in
// arrival order. A goroutine that holds the lock and releases it while others
// of its Client wait passes it to the oldest of them without a round trip:
// the new holder takes over the owner field (or permit id), and with it the
// lease and the watchdog's renewals (and, for a kind with fencing tokens, the
// next of a block of tokens its acquisition in Redis reserved, so tokens
// still rise strictly from holder to holder, across processes too).
//
// Fairness across processes is kept by a budget per turn: TurnPasses local
// passes (within TurnSpan of the acquisition in Redis, a cap for long
// critical sections), or, when holds are short, as many as fit in TurnBurst,
// up to TurnMaxPasses. A turn thus lasts a few holds or a couple of
// milliseconds, whichever is longer. Then the holder releases the lock in
// Redis, which hands it to the head of the Redis queue, and the oldest local
// waiter queues at the tail as the Client's next leader: by itself, or (a
// kind whose release script can do it, see Successor) queued by that very
// release. Each Client with waiters thus gets one turn in Redis's arrival
// order.
//
// A release that ends a contended turn with no local waiter keeps the lock
// for the Client's next acquisition for up to the linger (see Park), and a
// kind that can queue a place for it in the release reserves one (see
// Reserve).
//
// Only holds with the watchdog's lease take part: a fixed lease could not be
// honoured by a pass. A pass costs no round trip, so it cannot ask Redis
// whether the hold is still ours; it refuses whenever the Client knows or
// suspects otherwise (see newPass), and the release then goes through Redis,
// which settles it.
const (
	TurnPasses    = 8
	TurnSpan      = time.Second
	TurnBurst     = 2 * time.Millisecond
	TurnMaxPasses = 64
)

// NoTokens is the last token given to Form by a kind without fencing tokens:
// its passes are not bounded by a block of them.
const NoTokens = ^uint64(0)

// TurnLock is one lock as the turns machinery sees it: a name, unique within
// its table, and how to give back in Redis a lock no goroutine will take.
type TurnLock interface {
	TurnName() string
	// GiveBack releases the lock passed as p, which no goroutine of the
	// Client will take (a kept lock whose linger ran out, or one passed to a
	// call that could not take it up as the Client closes), in Redis, in the
	// background, as the hold's final release would: it goes to the head
	// waiter. One that fails leaves it to expire with its lease.
	GiveBack(p *Pass)
}

// Reserver is a TurnLock whose release can queue a place for the Client's
// next acquisition (see Reserve).
type Reserver interface {
	TurnLock
	// GiveUpPlace gives up in Redis (in the background) the place p queued
	// for an acquisition that never took it; p.W has been left. uncertain:
	// the release that queues it may still run late (its reply was lost).
	GiveUpPlace(p *Promotion, uncertain bool)
}

// TurnWatch hears messages addressed to a hold's owner field while it is
// held (a *mux.Waiter tagged with it): one means the hold may be gone.
type TurnWatch interface {
	Live() bool
	C() <-chan struct{}
	Leave(satisfied bool)
}

// TurnTable names one of a Client's turn tables: one per kind of lock, as
// names of different kinds are different locks.
type TurnTable uint8

const (
	MutexTurns TurnTable = iota
	PermitTurns
	turnTables
)

// Turns is the turn state of one Client's locks of one kind, by name.
type Turns struct {
	c      *Client
	linger atomic.Int64 // see Config.Linger; 0: never park
	// after sets the timers of parks and reservations (AfterFunc; tests
	// use the runtime's timers, which a synctest bubble fakes).
	after func(time.Duration, func()) Timer

	mu     sync.Mutex
	m      map[string]*cohort
	relock map[string]*relockStat // see Park
}

func newTurns(c *Client, linger time.Duration) *Turns {
	t := &Turns{c: c, after: AfterFunc, m: make(map[string]*cohort), relock: make(map[string]*relockStat)}
	t.linger.Store(int64(linger))
	return t
}

// Turns returns the Client's turn table of one kind.
func (c *Client) Turns(table TurnTable) *Turns { return c.turns[table] }

// Linger is how long a released lock may be kept for the Client (see Park).
func (t *Turns) Linger() time.Duration { return time.Duration(t.linger.Load()) }

// SetLinger changes it (tests).
func (t *Turns) SetLinger(d time.Duration) { t.linger.Store(int64(d)) }

// cohort is one lock's state in one Client. Guarded by Turns.mu.
//
// Liveness rests on one invariant, restored by settle after every change:
// while goroutines wait, the Client either holds the lock (and passes it on
// or names a successor when it releases it) or has a leader waiting in Redis.
type cohort struct {
	refs    int  // waiters joined, plus one while held, plus a reservation's
	held    bool // a hold of this Client owns the lock and may pass it on
	hold    *Hold
	next    uint64 // next..last: fencing tokens left to pass on
	last    uint64
	passed  int           // local passes in this turn
	since   time.Time     // start of this turn
	waiters []*TurnWaiter // arrival order
	leader  *TurnWaiter   // waits in Redis for the Client, or is about to
	watch   TurnWatch     // see TurnWatch; nil for a kind without one
	// contended: waiters of other Clients were queued in Redis when this
	// Client took the lock (see Park).
	contended bool
	// parked is the lock kept, after its last release, for the next
	// acquisition of this Client until parkTimer fires (see Park).
	parked    *Pass
	parkTimer Timer
	parkedBy  TurnLock
	parkedAt  time.Time
	// unparked counts the acquisitions of this turn that took a parked
	// lock: the Client's goroutines lock again right after release.
	unparked int
	// reserveTimer gives up a reserved place no acquisition took.
	reserveTimer Timer
}

// TurnWaiter is one waiting acquisition, as its Client's turns see it.
type TurnWaiter struct {
	ready  chan struct{} // closed when passed the lock or made the leader
	closed bool
	// unreached: as the leader, its last attempt could not reach Redis
	// (see NoteReached).
	unreached bool
	w         *mux.Waiter // its Redis-side wait, if it has one
	pass      *Pass
	// successor marks a leader chosen by a releasing holder, which is
	// queueing it in Redis (or keeping the lock for it); promo is what the
	// holder did for it then.
	successor bool
	promo     *Promotion
	// reservedBy marks a placeholder leader standing for an acquisition
	// the Client expects (see Reserve): no goroutine waits behind it yet.
	reservedBy Reserver
}

// Ready is closed when lw is passed the lock or made the leader.
func (lw *TurnWaiter) Ready() <-chan struct{} { return lw.ready }

// Reserved reports whether lw is a placeholder for an expected acquisition.
func (lw *TurnWaiter) Reserved() bool { return lw.reservedBy != nil }

// Pass is a lock passed on within the Client: what the new hold takes over.
type Pass struct {
	Owner string // owner field, or permit id
	Token uint64 // fencing token of the new hold (kinds with tokens)
	Lease time.Duration
	Until time.Time
	Epoch uint64 // Client epoch of the command that last confirmed the hold
	Late  bool   // see Hold.LateAttempts
	// Claim: the lease in Redis is still the claim window of a hand-off,
	// which the new hold extends (see Hold.AwaitExtension); 0: none.
	Claim time.Duration
	At    time.Time // when it was passed (for the hand-off latency)
}

// margin is the validity a lock must have left to be passed on: half its
// lease, or, while a claim awaits its extension, a third of the claim window
// for that extension to land.
func margin(lease, claim time.Duration) time.Duration {
	if claim > 0 {
		return claim / 3
	}
	return lease / 2
}

func (p *Pass) margin() time.Duration { return margin(p.Lease, p.Claim) }

// Promotion is a place in the Redis queue taken for a local waiter by the
// release that ended its Client's turn: the owner id it is queued under, a
// Waiter subscribed and tagged with it (so that the hand-off message cannot
// be missed), and what the wait in Redis needs to know.
type Promotion struct {
	W        *mux.Waiter
	Owner    string
	Secret   string
	QueuedAt Ticket
	// Fence is what a grant to the place names (see SuccessionReply.Place).
	Fence   uint64
	RetryIn time.Duration
	Check   bool // ask Redis at once: the release handed the lock to no one
}

// GiveUp gives up the place p, which the acquisition it was queued for did
// not take (it left: see Turns.Leave), in Redis.
func (p *Promotion) GiveUp(k Reserver) {
	p.W.Leave(true)
	k.GiveUpPlace(p, false)
}

func (lw *TurnWaiter) wake() {
	if !lw.closed {
		lw.closed = true
		close(lw.ready)
	}
	if lw.w != nil {
		lw.w.Notify()
	}
}

func (co *cohort) canPass(now time.Time) bool {
	if !co.held || co.hold == nil || co.next > co.last {
		return false
	}
	age := now.Sub(co.since)
	return co.passed < TurnPasses && age < TurnSpan || co.passed < TurnMaxPasses && age < TurnBurst
}

// settle makes the oldest waiter the leader when the Client neither holds
// the lock nor has one; it wakes up to queue in Redis.
func (co *cohort) settle() {
	if !co.held && co.leader == nil && len(co.waiters) > 0 {
		co.leader = co.waiters[0]
		co.leader.wake()
	}
}

func (t *Turns) get(name string) *cohort {
	co := t.m[name]
	if co == nil {
		co = &cohort{}
		t.m[name] = co
	}
	return co
}

func (t *Turns) put(name string, co *cohort) {
	if co.refs == 0 && co.parked == nil && t.m[name] == co {
		delete(t.m, name)
	}
}

// Active reports whether goroutines of this Client hold or wait for the lock.
func (t *Turns) Active(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[name] != nil
}

// NoteReached records whether the last attempt of this Client's leader for
// name had an answer from Redis (the lock acquired, or found taken) or met a
// connection error.
func (t *Turns) NoteReached(name string, reached bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil && co.leader != nil {
		co.leader.unreached = !reached
	}
}

// Unreached reports whether a call of this Client that waits for name behind
// the Client's other calls has nothing to go by but a connection error: the
// Client does not hold the lock, and its leader's last attempt could not
// reach Redis. (Otherwise it waits behind a holder, or a leader whose
// answer is on its way; a new leader has had none yet.)
func (t *Turns) Unreached(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	return co != nil && !co.held && co.leader != nil && co.leader.unreached
}

// Join registers a waiting acquisition. lead reports that it is the
// Client's leader and goes to Redis; otherwise it waits for lw.Ready: a
// pass, or being made the leader (with a promotion, or to queue by itself).
func (t *Turns) Join(name string) (lw *TurnWaiter, lead bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	co.refs++
	lw = &TurnWaiter{ready: make(chan struct{})}
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

// Leave ends a waiting acquisition. It returns the lock if it was passed to
// the call but not taken, which the caller must pass on (its handOn), and a
// promotion not taken up, whose place in Redis the caller must give up.
func (t *Turns) Leave(name string, lw *TurnWaiter) (*Pass, *Promotion) {
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

// Take returns the lock passed to lw, if any, and records w (if not nil),
// the Redis-side wait of lw, so that a later pass wakes it.
func (t *Turns) Take(lw *TurnWaiter, w *mux.Waiter) *Pass {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.pass
	lw.pass = nil
	if w != nil {
		lw.w = w
	}
	return p
}

// TakePromotion returns the place queued for lw by a release, if any.
func (t *Turns) TakePromotion(lw *TurnWaiter) *Promotion {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.promo
	lw.promo = nil
	return p
}

// Form records h, just acquired in Redis by the acquisition of lw (nil if it
// had none), as the Client's holder of the lock, free to pass it on while
// the budget lasts: passes take the fencing tokens h.token+1..last (NoTokens:
// a kind without them). The turn takes watch, if any (see TurnWatch).
// contended says whether other waiters were queued in Redis then.
func (t *Turns) Form(name string, h *Hold, last uint64, lw *TurnWaiter, watch TurnWatch, contended bool) {
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
	co.next, co.last = h.token+1, last
	co.passed, co.since, co.unparked = 0, time.Now(), 0
	co.contended = contended
}

// Adopt records h, built from a pass, as the Client's holder of the lock.
func (t *Turns) Adopt(name string, h *Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil && co.held && co.hold == nil {
		co.hold = h
	}
}

// AbortTransit ends local passing when p, a pass in transit, could not
// become a hold (the Client is closing), and gives the lock back through
// Redis, so that other Clients need not wait out its lease.
func (t *Turns) AbortTransit(k TurnLock, p *Pass) {
	t.Dissolve(k.TurnName(), nil)
	k.GiveBack(p)
}

// TakeOver registers h, the hold the pass p becomes, and starts it where
// the passing hold left off: valid as p says, a claim it carries awaiting
// its extension, and the Client's holder of k from now on. When the Client
// is closing, h ends with cause ended and the lock is given back (see
// AbortTransit); TakeOver then reports false.
func (t *Turns) TakeOver(k TurnLock, h *Hold, p *Pass, ended error) bool {
	if !h.c.Register(h) {
		h.End(ended)
		t.AbortTransit(k, p)
		return false
	}
	h.StartFrom(p.Until, p.Epoch)
	h.AwaitExtension(p.Claim)
	t.Adopt(k.TurnName(), h)
	return true
}

// PassOn hands the lock held by h to the oldest local waiter, if the budget
// allows; h must be at its last hold level. It reports whether it did: h is
// then the caller's to end, and nothing is to be done in Redis.
func (t *Turns) PassOn(name string, h *Hold) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	now := time.Now()
	if co == nil || co.hold != h || len(co.waiters) == 0 || !co.canPass(now) {
		return false
	}
	p := co.newPass(h, now)
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
// this Client, when nothing the Client knows puts the hold in doubt (see
// trusted; a connection error since its last confirmation) and enough of its
// lease is left (see margin) at now; nil otherwise. The lock is in transit
// until a new hold adopts it.
func (co *cohort) newPass(h *Hold, now time.Time) *Pass {
	if !co.trusted(h) {
		return nil
	}
	lease, renewed := h.Lease()
	until := h.ValidUntil()
	confirmed, epoch := h.Confirmed()
	claim := h.Claim()
	if !renewed || !confirmed || until.Sub(now) < margin(lease, claim) {
		return nil
	}
	p := &Pass{Owner: h.owner, Token: co.next, Lease: lease, Until: until, Epoch: epoch, Late: h.lateAttempts, Claim: claim, At: now}
	if co.last != NoTokens {
		co.next++
	}
	co.passed++
	co.hold = nil // in transit: Adopt sets the new hold
	return p
}

// trusted reports whether nothing the Client heard puts h's hold in doubt:
// its watch, for a kind that has one, is live and got no message. A message
// (anyone may publish one) only sends the release through Redis, which
// confirms or refutes the hold.
func (co *cohort) trusted(h *Hold) bool {
	if co.watch == nil {
		return true
	}
	if !co.watch.Live() {
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
	return co.watch == nil || co.watch.Live() && !co.heard()
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

// Dissolve ends local passing of the lock held by h (its final release is
// under way, or it ended otherwise); a successor being elected is dropped and
// the oldest waiter queues in Redis by itself.
func (t *Turns) Dissolve(name string, h *Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil {
		t.dissolveLocked(name, co, h)
	}
}

func (t *Turns) dissolveLocked(name string, co *cohort, h *Hold) {
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

// Waiting returns how many acquisitions of the Client wait for the lock name
// in the Client (the leader included). For tests.
func (t *Turns) Waiting(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil {
		return len(co.waiters)
	}
	return 0
}

// Held reports whether a hold of the Client owns the lock name as a turn
// that may pass it on. For tests.
func (t *Turns) Held(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	return co != nil && co.held
}

// Heard reports whether the watch of the lock name heard a message for its
// owner field. For tests.
func (t *Turns) Heard(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	return co != nil && co.watch != nil && len(co.watch.C()) > 0
}

// EndTurn spends what is left of the budget of the Client's turn on the
// lock name, so that its next release ends the turn. For tests.
func (t *Turns) EndTurn(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil {
		co.passed = TurnMaxPasses
	}
}

// Parked reports whether the lock name is kept for the Client's next
// acquisition (see Park). For tests.
func (t *Turns) Parked(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	return co != nil && co.parked != nil
}
