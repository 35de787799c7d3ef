package rlock

import (
	"strconv"
	"sync"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
)

// Lock cohorting: a goroutine that holds a lock and unlocks it while other
// goroutines of the same Client wait for it passes the lock to the oldest of
// them without releasing it in Redis. The new holder takes over the owner
// field (and with it the lease and the watchdog's renewals) and the next of a
// block of fencing tokens that the Redis acquisition reserved, so tokens still
// rise strictly from holder to holder, across processes too. A hand-off costs
// no round trip at all.
//
// Fairness across processes is kept by a budget: at most cohortPasses local
// hand-offs (within cohortSpan of the Redis acquisition, a cap for long
// critical sections; a tighter time budget starved cohorting under load,
// when a round trip takes milliseconds); then the lock is
// released in Redis, which hands it to the head of the Redis queue. Local
// waiters are served in their arrival order; those that arrived while the
// lock was held locally wait without queueing in Redis, and queue there
// (behind everyone already queued) if the budget runs out before their turn.
//
// Only holds with the watchdog's lease take part: a WithLease hold keeps its
// own fixed lease, which a hand-off could not honour.
const (
	cohortPasses = 8
	cohortSpan   = time.Second
	// tokenBlock fencing tokens are reserved by a contended acquisition: one
	// for the holder and one per possible local hand-off.
	tokenBlock = cohortPasses + 1
)

var tokenBlockArg = strconv.Itoa(tokenBlock)

// cohorts is the cohorting state of one Client's locks, by lock name.
type cohorts struct {
	mu sync.Mutex
	m  map[string]*cohort
}

// cohort is one lock's state in one Client. Guarded by cohorts.mu.
type cohort struct {
	refs    int  // waiters joined, plus one while held
	held    bool // a hold of this Client owns the lock and may pass it on
	hold    *core.Hold
	next    uint64 // next..last: fencing tokens left to pass on
	last    uint64
	passes  int
	until   time.Time
	waiters []*localWaiter // arrival order
}

// localWaiter is one waiting Lock call, as the cohort sees it.
type localWaiter struct {
	ready  chan struct{} // closed when passed the lock or told to queue in Redis
	closed bool
	w      *pubsub.Waiter // its Redis-side wait, if it has one
	pass   *cohortPass
}

// cohortPass is a lock passed on locally: what the new hold takes over.
type cohortPass struct {
	owner string
	token uint64
	lease time.Duration
	until time.Time
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
	return co.held && co.passes > 0 && co.next <= co.last && now.Before(co.until)
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

// join registers a waiting Lock call. localOnly reports that a hold of this
// Client can pass the lock on now: the caller waits for lw.ready alone, and
// queues in Redis only if it is woken without a pass.
func (t *cohorts) join(name string) (lw *localWaiter, localOnly bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	co.refs++
	lw = &localWaiter{ready: make(chan struct{})}
	co.waiters = append(co.waiters, lw)
	return lw, co.canPass(time.Now())
}

// leave ends a waiting Lock call and returns the lock if it was passed to the
// call but not taken: the caller must pass it on (see Mutex.handOn).
func (t *cohorts) leave(name string, lw *localWaiter) *cohortPass {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil {
		return nil // cannot happen: joined waiters keep it
	}
	for i, x := range co.waiters {
		if x == lw {
			co.waiters = append(co.waiters[:i], co.waiters[i+1:]...)
			break
		}
	}
	p := lw.pass
	lw.pass = nil
	co.refs--
	t.put(name, co)
	return p
}

// take returns the lock passed to lw, if any, and records w, the Redis-side
// wait of lw, so that a later pass wakes it.
func (t *cohorts) take(lw *localWaiter, w *pubsub.Waiter) *cohortPass {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := lw.pass
	lw.pass = nil
	if w != nil {
		lw.w = w
	}
	return p
}

// form records h, just acquired in Redis with tokens token..last, as the
// Client's holder of the lock, free to pass it on while the budget lasts.
func (t *cohorts) form(name string, h *core.Hold, last uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.get(name)
	if !co.held {
		co.refs++
	}
	co.held, co.hold = true, h
	co.next, co.last = h.Token+1, last
	co.passes, co.until = cohortPasses, time.Now().Add(cohortSpan)
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
	lease, renewed := h.Lease()
	until := h.ValidUntil()
	if !renewed || time.Until(until) < lease/2 {
		return false
	}
	lw := co.waiters[0]
	co.waiters = co.waiters[1:]
	lw.pass = &cohortPass{owner: h.Owner, token: co.next, lease: lease, until: until}
	co.next++
	co.passes--
	co.hold = nil // in transit: adopt sets the new hold
	lw.wake()
	return true
}

// dissolve ends local passing of the lock held by h (its final release is
// under way, or it ended otherwise) and sends the waiters that were waiting
// for a local pass to queue in Redis.
func (t *cohorts) dissolve(name string, h *core.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	co := t.m[name]
	if co == nil || !co.held || co.hold != h {
		return
	}
	co.held, co.hold = false, nil
	co.refs--
	for _, lw := range co.waiters {
		if !lw.closed {
			lw.closed = true
			close(lw.ready)
		}
	}
	t.put(name, co)
}
