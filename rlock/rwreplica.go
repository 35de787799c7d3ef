package rlock

import (
	"context"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
)

// unacked gives back an RWMutex acquisition (a read or write hold, taken at
// once, granted while queued, or a downgrade) that too few replicas
// acknowledged (WithReplicaAck), as acquisition.unacked does for a Mutex: at
// once, under a tombstone, and what it frees goes to the head of the queue.
// With WithReplicaAckRetry a waiting call tries again soon under a new owner
// field (queued again at the tail); otherwise the attempt fails with
// ErrNotReplicated.
func (a *rwAcquisition) unacked(ctx context.Context, w *mux.Waiter, acked int64) (bool, time.Duration, error) {
	rw := a.rw
	c := rw.c
	err := notReplicated(ctx, c, acked)
	owner, secret := a.owner, a.secret
	if uerr := c.GiveBack(ctx, func(ctx context.Context) error {
		return rwAbandonScript(ctx, c, rw.keys, owner, secret, a.write, a.lease, true)
	}, func() { rwAbandon(c, rw.keys, owner, secret, a.write, a.lease, true) }); uerr != nil {
		err = fmt.Errorf("%w (giving it back failed, the lock is free at the latest in %v: %w)", err, a.lease, uerr)
	}
	a.owner, a.secret, a.uncertain = c.NewID(), newSecret(), false
	a.queuedAt, a.queuedArrival = core.Ticket{}, 0
	a.arrival.Store(0)
	a.sawHolder = false
	if c.Cfg.ReplicaAckRetry && w != nil {
		// The wait goes on; if it runs out, the replicas are why.
		a.lastErr = notReplicated(context.WithoutCancel(ctx), c, acked)
		return false, ackRetryIn, nil
	}
	if ctx.Err() == nil {
		a.lastErr = err // not when ctx ended the WAIT: Redis was reached
	}
	return false, 0, err
}

// reentryUnacked takes back an RWMutex re-entry that too few replicas
// acknowledged (see Mutex.reentryUnacked): one release, so the hold count is
// as before the call; when that cannot be confirmed, the whole hold is given
// up.
func (rw *RWMutex) reentryUnacked(ctx context.Context, h *core.Hold, write bool, lease time.Duration, acked int64) error {
	what := lockWord(write)
	err := notReplicated(ctx, rw.c, acked)
	requestID := rw.c.NewID()
	var left int64
	uerr := core.RetryTransient(ctx, func() (e error) {
		left, e = rwReleaseScript(ctx, rw.c, rw.keys, h.Owner, write, requestID, lease, false)
		rw.c.NoteError(e)
		return e
	})
	switch {
	case uerr != nil:
		ae := h.Abandon("re-enter", uerr, func(ctx context.Context) error {
			return rwAbandonScript(ctx, rw.c, rw.keys, h.Owner, "-", write, lease, false)
		})
		return rw.wrap("re-enter "+what+" lock", fmt.Errorf("%w; taking it back: %w", err, ae))
	case left < 1:
		// The outer hold is gone too (lost to a failover or expiry).
		h.End(ErrLeaseLost)
		return rw.notHeld(what, fmt.Errorf("%w; %w", ErrLeaseLost, core.Inner(err)))
	}
	h.SetCount(left)
	return rw.wrap("re-enter "+what+" lock", err)
}
