package rlock

import (
	"context"
	"fmt"
	"time"

	"github.com/relockio/relock/internal/core"
)

// reentryUnacked takes back an RWMutex re-entry that too few replicas
// acknowledged (see Mutex.reentryUnacked): one release, so the hold count and
// the outer hold's lease are as before the call; when that cannot be
// confirmed, the whole hold is given up.
func (rw *RWMutex) reentryUnacked(ctx context.Context, h *core.Hold, write bool, lease time.Duration, renewed bool, acked int64) error {
	what := lockWord(write)
	err := notReplicated(ctx, rw.c, acked)
	req := newRequest(rw.c)
	var left int64
	t := h.Send(lease)
	uerr := core.RetryTransient(ctx, func() (e error) {
		left, e = rwReleaseScript(ctx, rw.c, rw.keys, h.Owner(), write, req, lease, false)
		rw.c.NoteError(e)
		return e
	})
	switch {
	case uerr != nil:
		ae := h.Abandon("re-enter", uerr, func(ctx context.Context) error {
			return rwAbandonScript(ctx, rw.c, rw.keys, h.Owner(), "-", write, lease, false)
		})
		return rw.wrap("re-enter "+what+" lock", fmt.Errorf("%w; taking it back: %w", err, ae))
	case left < 1:
		// The outer hold is gone too (lost to a failover or expiry).
		h.End(ErrLeaseLost)
		return rw.notHeld(what, fmt.Errorf("%w; %w", ErrLeaseLost, core.Inner(err)))
	}
	h.SetLease(lease, renewed)
	h.Kept(t, lease)
	h.SetCount(left)
	return rw.wrap("re-enter "+what+" lock", err)
}
