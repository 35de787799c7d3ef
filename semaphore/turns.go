package semaphore

import (
	"context"
	"time"

	"github.com/relockio/relock/internal/core"
)

// Turns (see core.Turns, which does them for every kind): the goroutines of
// one Client that wait for a one-permit semaphore (limit configured as 1:
// NewLock, or New with WithLimit(1)) queue in Redis as one, and a release
// passes the lease (permit id, validity, and with them the watchdog's
// renewals) to the oldest of them without a round trip, as rlock passes a
// lock's owner field, within the same budget per turn as the Mutex's. A
// release that ends a contended turn with no local waiter keeps the lease
// for the Client's next Acquire for up to the linger (core.Config.Linger,
// rlock.WithLinger).
//
// The release that ends a turn names the Client's next leader in Redis as
// the Mutex's does, with the same code (core.Turns.Succeed): sem_release.lua
// queues the oldest local waiter, under a permit id of its own, behind the
// waiters it hands the permit to, in the same script (or, when no one else
// is queued, keeps the lease for the Client and passes it on locally), and,
// when the Client's Acquire calls came back within the linger, queues a place
// for the next one, which takes it without a script (core.Turns.Reserve).
//
// What the semaphore lacks: fencing tokens (a pass hands on the permit id
// alone), and a watch on the permit id (nothing like ForceUnlock addresses a
// holder). A lease lost in Redis without the Client knowing (a key deleted,
// FLUSHALL) is found by the next renewal, which ends the hold: a hold that
// ended passes nothing on, and its Release reports the loss.

// permitTurn is a Semaphore as its Client's turns see it (core.Reserver).
type permitTurn Semaphore

// turn returns s as its Client's turns see it.
func (s *Semaphore) turn() *permitTurn { return (*permitTurn)(s) }

func (l *permitTurn) TurnName() string { return l.name }

// GiveBack releases a lease passed on that no Acquire took up.
func (l *permitTurn) GiveBack(p *core.Pass) { (*Semaphore)(l).releaseInBackground(p.Owner) }

// GiveUpPlace gives up a place a release queued for an Acquire that never
// came, in the background (a tombstone is always left: see sem_abandon.lua).
func (l *permitTurn) GiveUpPlace(p *core.Promotion, _ bool) {
	s := (*Semaphore)(l)
	entry := s.entry(p.Owner, "1", s.c.Cfg.WatchdogTimeout, p.Secret)
	s.c.GoUntil(time.Now().Add(s.c.Cfg.UnlockTimeout), func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error { return s.abandonScript(ctx, p.Owner, entry) })
	})
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
			_, err := s.releaseScript(ctx, id, requestID, retried, nil, 0)
			retried = true
			return err
		})
	})
}

// holdPassed turns a lease passed on locally into a permit context.
func (s *Semaphore) holdPassed(ctx context.Context, p *core.Pass) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		s.handOn(p)
		return nil, s.wrap("acquire", err)
	}
	permitCtx, cancel := core.LockContext(ctx)
	h := s.c.NewHold(s.holdSpec(p.Owner, p.Lease, true, permitCtx, cancel))
	if !s.turns.TakeOver(s.turn(), h, p, ErrReleased) {
		return nil, ErrClosed
	}
	h.OnEnd(func() { s.turns.Dissolve(s.name, h) })
	return s.withPermit(permitCtx, h, 1), nil
}

// handOn takes over a lease passed to an Acquire that is leaving, and
// releases it at once: to the next local waiter or in Redis. A release that
// fails gives the lease up (see release), leaving nothing to report.
func (s *Semaphore) handOn(p *core.Pass) {
	permitCtx, cancel := context.WithCancelCause(context.Background())
	h := s.c.NewHold(s.holdSpec(p.Owner, p.Lease, true, nil, cancel))
	if !s.turns.TakeOver(s.turn(), h, p, ErrReleased) {
		return // closing: given back in Redis
	}
	_ = s.release(permitCtx, &permit{hold: h, n: 1}, s.c.NewID(), false, false)
}
