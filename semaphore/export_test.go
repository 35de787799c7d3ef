package semaphore

import (
	"context"
	"strconv"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/rlock"
)

// ReleaseWithRequestID releases the permits carried by permitCtx as Release
// does, but under the given release request id, whose first attempt may have
// run already: a test can replay the request the way a retry inside Release
// does.
func ReleaseWithRequestID(s *Semaphore, permitCtx context.Context, requestID string) error {
	p := s.permitOf(permitCtx)
	if p == nil {
		return ErrNotHeld
	}
	return s.release(permitCtx, p, requestID, true, false)
}

// ReleaseScript runs sem_release.lua once for the permit carried by permitCtx,
// under request id, bypassing the client-side state of the hold: exactly what
// an attempt inside Release sends (retry: not its first), whose reply may be
// lost. It returns the script's answer: the permits released, or a negative
// code.
func ReleaseScript(ctx context.Context, s *Semaphore, permitCtx context.Context, requestID string, retry bool) (int64, error) {
	p := s.permitOf(permitCtx)
	if p == nil {
		return 0, ErrNotHeld
	}
	r, err := s.releaseScript(ctx, p.hold.Owner(), requestID, retry, nil, 0)
	return r.released, err
}

// AcquireScript runs sem_acquire.lua once for permit id, as a retried attempt
// of an Acquire does (without queueing), and returns its status and value: a
// test can replay an attempt whose reply was lost.
func AcquireScript(ctx context.Context, s *Semaphore, id string, n int64) (status, value int64, err error) {
	r, err := s.acquireScript(ctx, acquireArgs{id: id, want: strconv.FormatInt(n, 10), secret: newSecret(), lease: s.c.Cfg.WatchdogTimeout})
	return r.status, r.value, err
}

// GrantChannel is the channel on which s's Client is handed permits.
func GrantChannel(s *Semaphore) string { return s.grant }

// LocalWaiters returns how many Acquire calls of s's Client wait for s in the
// Client (the leader, which waits in Redis, included); 0 without turns.
func LocalWaiters(s *Semaphore) int {
	if s.turns == nil {
		return 0
	}
	return s.turns.Waiting(s.name)
}

// SetLinger sets the linger of c's turns (core.Config.Linger, which
// rlock.WithLinger is to fill); call it before c's semaphores are used.
func SetLinger(c *rlock.Client, d time.Duration) {
	c.Core().Turns(core.PermitTurns).SetLinger(d)
}

// Parked reports whether s's Client keeps its permit for its next Acquire
// after the last release (see core.Turns.Park).
func Parked(s *Semaphore) bool {
	return s.turns != nil && s.turns.Parked(s.name)
}

// EndTurn spends what is left of the budget of the turn of s's Client, so
// that its next release ends the turn in Redis (see core.Turns).
func EndTurn(s *Semaphore) {
	if s.turns != nil {
		s.turns.EndTurn(s.name)
	}
}

// ReleaseOutcome is sem_release.lua's reply, decoded.
type ReleaseOutcome struct {
	Released               int64
	Kept, Unqueued, Queued bool
	Arrival                uint64
	Granted                int64
}

// ReleaseScriptNaming runs sem_release.lua once for the permit carried by
// permitCtx, under request id (retry: not its first attempt), naming a
// successor queued under the permit id successor (a reserved place when
// reserved), as the release that ends a turn does.
func ReleaseScriptNaming(ctx context.Context, s *Semaphore, permitCtx context.Context, requestID string, retry bool, successor string, reserved bool) (ReleaseOutcome, error) {
	p := s.permitOf(permitCtx)
	if p == nil {
		return ReleaseOutcome{}, ErrNotHeld
	}
	next := &core.Succession{Owner: successor, Secret: newSecret(), Reserved: reserved}
	r, err := s.releaseScript(ctx, p.hold.Owner(), requestID, retry, next, s.c.Cfg.WatchdogTimeout)
	return ReleaseOutcome{r.released, r.kept, r.unqueued, r.queued, r.arrival, r.granted}, err
}
