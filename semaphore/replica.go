package semaphore

import (
	"context"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// unacked gives back permits that too few replicas acknowledged
// (rlock.WithReplicaAck on the Client) before the call goes on: at once, so
// that a failing Acquire leaves nothing held in Redis, and under a tombstone,
// as the permit id is not used again (what they free goes to the head of the
// queue). With rlock.WithReplicaAckRetry a waiting call tries again soon,
// under a new id (queued again at the tail); otherwise the attempt fails with
// ErrNotReplicated.
func (a *acquisition) unacked(ctx context.Context, w *mux.Waiter, acked int64) (bool, time.Duration, error) {
	s := a.s
	c := s.c
	err := fmt.Errorf("semaphore: acquire %q: %w", s.name, core.Inner(c.NotReplicated(ctx, acked)))
	id, entry := a.id, a.entry()
	if uerr := c.GiveBack(ctx, func(ctx context.Context) error { return s.abandonScript(ctx, id, entry) }, func() {
		c.GoUntil(time.Now().Add(max(a.lease, c.Cfg.WatchdogTimeout)), func(ctx context.Context) {
			_ = core.RetryTransient(ctx, func() error { return s.abandonScript(ctx, id, entry) })
		})
	}); uerr != nil {
		err = fmt.Errorf("%w (giving them back failed, they are free at the latest in %v: %w)", err, a.lease, uerr)
	}
	a.newID()
	a.traced = false
	if c.Cfg.ReplicaAckRetry && w != nil {
		// The wait goes on; if it runs out, the replicas are why.
		a.lastErr = fmt.Errorf("semaphore: acquire %q: %w", s.name, core.Inner(c.NotReplicated(context.WithoutCancel(ctx), acked)))
		return false, core.AckRetryIn, nil
	}
	if ctx.Err() == nil {
		a.lastErr = err // not when ctx ended the WAIT: Redis was reached
	}
	return false, 0, err
}
