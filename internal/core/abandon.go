package core

import (
	"context"
	"fmt"
	"time"
)

// AbandonError reports a hold the Client gave up because the outcome of a
// command on it could not be learned: a release or a re-entry that failed
// after its retries (Redis unreachable for longer than the unlock timeout, or
// a command denied). The hold is no longer renewed, its context is cancelled,
// and a clean-up is tried in the background; whatever happens, Redis frees it
// by FreeBy at the latest, when the longest lease any of its commands set runs out.
type AbandonError struct {
	Op     string    // what failed: "unlock", "re-enter", "release"
	FreeBy time.Time // Redis frees the hold by then at the latest
	Err    error     // why the command failed
}

func (e *AbandonError) Error() string {
	return fmt.Sprintf("%s failed (%v): the hold was given up and expires in Redis by %s at the latest",
		e.Op, e.Err, e.FreeBy.Format("15:04:05.000"))
}

// Is makes the error match ErrAbandoned.
func (e *AbandonError) Is(target error) bool { return target == ErrAbandoned }

func (e *AbandonError) Unwrap() error { return e.Err }

// Abandon gives h up after a command on it (op) failed with err and its
// effect in Redis is unknown: renewals stop, so that Redis frees the hold
// within one lease at most, and h ends with a cause matching ErrLeaseLost and
// ErrAbandoned. cleanup, if not nil, is retried in the background until it
// succeeds, it fails for good, the hold would have expired anyway, or the
// Client closes; it must be idempotent (an abandon script, say).
func (h *Hold) Abandon(op string, err error, cleanup func(ctx context.Context) error) *AbandonError {
	h.mu.Lock()
	renewed := h.renew
	h.renew = false
	bound := h.maxLease
	h.mu.Unlock()
	if renewed {
		// A renewal sent just before may still run: it has two periods.
		bound += 2 * h.c.Cfg.WatchdogTimeout / 3
	}
	ae := &AbandonError{Op: op, FreeBy: time.Now().Add(bound), Err: err}
	h.End(fmt.Errorf("%w: %w", h.leaseLost(), ae))
	if cleanup != nil {
		h.c.GoUntil(ae.FreeBy, func(ctx context.Context) {
			_ = RetryTransient(ctx, func() error { return cleanup(ctx) })
		})
	}
	return ae
}

// GoUntil runs fn in the background (see GoCtx) with a context that ends at
// deadline, or when Close cuts background work short, whichever comes first.
func (c *Client) GoUntil(deadline time.Time, fn func(ctx context.Context)) bool {
	return c.GoCtx(func(bg context.Context) {
		ctx, cancel := context.WithDeadline(bg, deadline)
		defer cancel()
		fn(ctx)
	})
}
