package semaphore

import (
	"context"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
)

// Turns: the goroutines of one Client that wait for a one-permit semaphore
// (limit configured as 1: NewLock, or New with WithLimit(1)) queue in Redis as
// one. The oldest of them, the leader, waits there for the Client; the others
// wait in the Client, in arrival order. A goroutine that holds the permit and
// releases it while others of its Client wait passes its lease (permit id,
// validity, and with them the watchdog's renewals) to the oldest of them
// without a round trip, as rlock passes a lock's owner field.
//
// Fairness across processes is kept by the same budget per turn as the
// Mutex's: turnPasses local passes within turnSpan of the Redis acquisition,
// or up to turnMaxPasses within turnBurst. Then the holder releases the lease
// in Redis, which grants the permit to the head of the Redis queue, and the
// oldest local waiter queues at its tail as the Client's next leader.
//
// Only watchdog leases take part (a WithLease hold keeps its own fixed lease),
// and a pass is made only while nothing puts the lease in doubt: it is
// confirmed (no connection error seen since the command that last confirmed
// it was sent) and at least half of it is left. A lease lost in Redis without
// the Client knowing (a key deleted, FLUSHALL) is found by the next renewal,
// which ends the hold: a hold that ended passes nothing on, and its Release
// reports the loss.
//
// A release that ends a contended turn (the Client had to queue for the
// permit) with no local waiter keeps the lease for the Client's next Acquire
// for up to the linger (core.Config.Linger, rlock.WithLinger), within the
// same budget ("park"); when the linger runs out unused the lease is released
// in Redis, and the Client stops lingering on that semaphore until an Acquire
// comes within the linger of a release again.
const (
	turnPasses    = 8
	turnSpan      = time.Second
	turnBurst     = 2 * time.Millisecond
	turnMaxPasses = 64
)

type turnsKey struct{}

// turns is the turn state of one Client's one-permit semaphores, by name.
type turns struct {
	mu     sync.Mutex
	m      map[string]*cohort
	linger time.Duration
	missed map[string]time.Time // linger ran out unused; value: last release that did not park
	// gaps estimates, by name, how soon the Client's next Acquire comes
	// after its last release (see core.NoteRelockGap): a park lingers a
	// few times that, at most linger.
	gaps map[string]time.Duration
}

func turnsOf(c *core.Client) *turns {
	return c.Local(turnsKey{}, func() any {
		t := &turns{m: make(map[string]*cohort), linger: c.Cfg.Linger, missed: make(map[string]time.Time), gaps: make(map[string]time.Duration)}
		c.OnClose(t.flush)
		return t
	}).(*turns)
}

// cohort is one semaphore's state in one Client. Guarded by turns.mu. While
// goroutines wait, the Client either holds the permit (and passes it on or
// releases it, which makes the oldest waiter the leader) or has a leader.
type cohort struct {
	refs      int  // waiters joined, plus one while held
	held      bool // a hold of this Client has the permit and may pass it on
	hold      *core.Hold
	passed    int
	since     time.Time
	contended bool // the holder's acquisition had to queue in Redis
	waiters   []*localWaiter
	leader    *localWaiter
	parked    *lease
	parkTimer core.Timer
	parkedBy  *Semaphore
	parkedAt  time.Time
}

type localWaiter struct {
	ready  chan struct{}
	closed bool
	pass   *lease
}

// lease is a permit lease passed on locally: what the new hold takes over.
type lease struct {
	id    string
	lease time.Duration
	until time.Time
	epoch uint64
	// claim: the permits' lease in Redis is still the claim window of a
	// hand-off, which the new hold extends (see core.Hold.AwaitExtension);
	// 0: none.
	claim time.Duration
	at    time.Time // when it was passed (for the hand-off latency)
}

// margin is the validity a lease must have left to be passed on: half of it,
// or, while a claim awaits its extension, a third of the claim window for
// that extension to land.
func (p *lease) margin() time.Duration {
	if p.claim > 0 {
		return p.claim / 3
	}
	return p.lease / 2
}

func (lw *localWaiter) wake() {
	if !lw.closed {
		lw.closed = true
		close(lw.ready)
	}
}

func (co *cohort) canPass(now time.Time) bool {
	if !co.held || co.hold == nil {
		return false
	}
	age := now.Sub(co.since)
	return co.passed < turnPasses && age < turnSpan || co.passed < turnMaxPasses && age < turnBurst
}

func (co *cohort) settle() {
	if !co.held && co.leader == nil && len(co.waiters) > 0 {
		co.leader = co.waiters[0]
		co.leader.wake()
	}
}

func (t *turns) get(name string) *cohort {
	co := t.m[name]
	if co == nil {
		co = &cohort{}
		t.m[name] = co
	}
	return co
}

func (t *turns) put(name string, co *cohort) {
	if co.refs == 0 && co.parked == nil && t.m[name] == co {
		delete(t.m, name)
	}
}

// join registers a waiting Acquire; lead reports that it is the leader and
// acquires in Redis, else it waits for lw.ready (a pass, or made the leader).
func (t *turns) join(name string) (lw *localWaiter, lead bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	co.refs++
	lw = &localWaiter{ready: make(chan struct{})}
	co.waiters = append(co.waiters, lw)
	if !co.held && co.leader == nil {
		co.leader = lw
		lw.closed = true
		close(lw.ready)
		return lw, true
	}
	return lw, false
}

// leave ends a waiting Acquire; it returns a lease passed to it but not
// taken, which the caller must pass on (see Semaphore.handOn).
func (t *turns) leave(name string, lw *localWaiter) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil {
		return nil
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
	p := lw.pass
	lw.pass = nil
	co.refs--
	co.settle()
	t.put(name, co)
	return p
}

func (t *turns) take(lw *localWaiter) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.pass
	lw.pass = nil
	return p
}

// form records h, just acquired in Redis by the leader lw, as the Client's
// holder, free to pass the permit on while the budget lasts.
func (t *turns) form(name string, h *core.Hold, lw *localWaiter, contended bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	if co.held {
		return // cannot happen: only a leader acquires in Redis
	}
	co.refs++
	if co.leader == lw {
		co.leader = nil
	}
	co.held, co.hold = true, h
	co.passed, co.since, co.contended = 0, time.Now(), contended
}

// adopt records h, built from a pass, as the holder.
func (t *turns) adopt(name string, h *core.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil && co.held && co.hold == nil {
		co.hold = h
	}
}

// newPass takes the lease from h for another goroutine of the Client when
// nothing puts it in doubt; nil otherwise.
func (co *cohort) newPass(h *core.Hold) *lease {
	d, renewed := h.Lease()
	until := h.ValidUntil()
	confirmed, epoch := h.Confirmed()
	p := &lease{id: h.Owner, lease: d, until: until, epoch: epoch, claim: h.Claim(), at: time.Now()}
	if !renewed || !confirmed || time.Until(until) < p.margin() {
		return nil
	}
	co.passed++
	co.hold = nil // in transit: adopt sets the new hold
	return p
}

// passOn hands h's lease to the oldest local waiter if the turn allows; it
// reports whether it did (h is then the caller's to end).
func (t *turns) passOn(name string, h *core.Hold) bool {
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

// park keeps h's lease, at a release with no local waiter, for the Client's
// next Acquire for up to the linger (see the comment at the top).
func (t *turns) park(s *Semaphore, h *core.Hold) bool {
	if t.linger <= 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[s.name]
	now := time.Now()
	if co == nil || co.hold != h || !co.contended || len(co.waiters) > 0 || co.parked != nil || !co.canPass(now) || s.c.IsClosed() {
		return false
	}
	if _, missed := t.missed[s.name]; missed {
		t.missed[s.name] = now
		return false
	}
	p := co.newPass(h)
	if p == nil {
		return false
	}
	co.parked, co.parkedBy, co.parkedAt = p, s, now
	// Nothing renews a parked lease: it is released while half of it (or a
	// third of its claim window) is still left, whatever the linger.
	linger := core.TurnLinger(t.linger, t.gaps[s.name])
	co.parkTimer = core.AfterFunc(min(linger, time.Until(p.until)-p.margin()), func() { t.expire(s, p) })
	return true
}

// unpark hands the lease parked for this Client to an Acquire; nil when none.
func (t *turns) unpark(s *Semaphore) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[s.name]
	if co == nil || co.parked == nil || !co.parkTimer.Stop() {
		if at, missed := t.missed[s.name]; missed && time.Since(at) < t.linger {
			// A linger as long as this gap would have paid: learn it, and
			// try again.
			delete(t.missed, s.name)
			t.noteGap(s.name, time.Since(at))
		}
		return nil
	}
	p := co.parked
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	delete(t.missed, s.name)
	t.noteGap(s.name, time.Since(co.parkedAt))
	if confirmed := p.epoch == s.c.Epoch(); !confirmed || time.Until(p.until) < p.margin() {
		t.releaseParked(s, co, p)
		return nil
	}
	return p
}

// expire releases a parked lease whose linger ran out unused.
func (t *turns) expire(s *Semaphore, p *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[s.name]
	if co == nil || co.parked != p {
		return
	}
	co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
	if len(t.missed) >= maxTurnStats {
		clear(t.missed)
	}
	// The release that parked it is the one an Acquire may still come
	// quickly after (see unpark).
	t.missed[s.name] = co.parkedAt
	t.releaseParked(s, co, p)
}

// maxTurnStats bounds turns.missed and turns.gaps: past it a map is cleared
// (they are only hints).
const maxTurnStats = 4096

// noteGap folds a relock gap into the semaphore's estimate. Called with t.mu
// held.
func (t *turns) noteGap(name string, gap time.Duration) {
	if _, known := t.gaps[name]; !known && len(t.gaps) >= maxTurnStats {
		clear(t.gaps)
	}
	t.gaps[name] = core.NoteRelockGap(t.gaps[name], gap)
}

// flush releases every parked lease at once (the Client is closing).
func (t *turns) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, co := range t.m {
		if co.parked != nil && co.parkTimer.Stop() {
			p, s := co.parked, co.parkedBy
			co.parked, co.parkedBy, co.parkTimer = nil, nil, nil
			t.releaseParked(s, co, p)
		}
	}
}

// releaseParked ends the turn and releases the parked lease p in Redis in the
// background; one that fails leaves it to expire with its lease (nothing
// renews it). Called with t.mu held.
func (t *turns) releaseParked(s *Semaphore, co *cohort, p *lease) {
	t.dissolveLocked(s.name, co, nil)
	t.put(s.name, co)
	s.releaseInBackground(p.id)
}

// abortTransit ends local passing when a lease in transit could not become a
// hold (the Client is closing).
func (t *turns) abortTransit(name string) {
	t.dissolve(name, nil)
}

// dissolve ends local passing of the lease held by h (its release in Redis
// is under way, or it ended otherwise): the oldest waiter becomes the leader.
func (t *turns) dissolve(name string, h *core.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if co := t.m[name]; co != nil {
		t.dissolveLocked(name, co, h)
	}
}

func (t *turns) dissolveLocked(name string, co *cohort, h *core.Hold) {
	if !co.held || co.hold != h {
		return
	}
	co.held, co.hold = false, nil
	co.refs--
	co.settle()
	t.put(name, co)
}

// releaseInBackground releases the lease id in Redis (granting the permit to
// the head of the queue), retried for up to the unlock timeout.
func (s *Semaphore) releaseInBackground(id string) {
	requestID := s.c.NewID()
	s.c.GoCtx(func(bg context.Context) {
		ctx, cancel := context.WithTimeout(bg, s.c.Cfg.UnlockTimeout)
		defer cancel()
		retried := false
		_ = core.RetryTransient(ctx, func() error {
			_, err := s.releaseScript(ctx, id, requestID, retried)
			retried = true
			return err
		})
	})
}

// holdPassed turns a lease passed on locally into a permit context.
func (s *Semaphore) holdPassed(ctx context.Context, p *lease) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		s.handOn(p)
		return nil, s.wrap("acquire", err)
	}
	permitCtx, cancel := core.LockContext(ctx)
	h := s.c.NewHold(permitKind, s.name, s.keys.permits, p.id, 0, p.lease, true, cancel)
	h.Ctx = permitCtx
	s.giveBackOnLapse(h)
	if !s.c.Register(h) {
		h.End(ErrReleased)
		s.turns.abortTransit(s.name)
		s.releaseInBackground(p.id)
		return nil, ErrClosed
	}
	h.StartFrom(p.until, p.epoch)
	h.AwaitExtension(p.claim)
	s.turns.adopt(s.name, h)
	h.OnEnd(func() { s.turns.dissolve(s.name, h) })
	return s.withPermit(permitCtx, h, 1), nil
}

// handOn takes over a lease passed to an Acquire that is leaving, and
// releases it at once: to the next local waiter or in Redis. A release that
// fails gives the lease up (see release), leaving nothing to report.
func (s *Semaphore) handOn(p *lease) {
	permitCtx, cancel := context.WithCancelCause(context.Background())
	h := s.c.NewHold(permitKind, s.name, s.keys.permits, p.id, 0, p.lease, true, cancel)
	s.giveBackOnLapse(h)
	if !s.c.Register(h) {
		h.End(ErrReleased)
		s.turns.abortTransit(s.name)
		s.releaseInBackground(p.id)
		return
	}
	h.StartFrom(p.until, p.epoch)
	h.AwaitExtension(p.claim)
	s.turns.adopt(s.name, h)
	_ = s.release(permitCtx, &permit{hold: h, n: 1}, s.c.NewID(), false, false)
}
