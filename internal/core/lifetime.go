package core

import (
	"context"
	"log/slog"
	"runtime"
)

// LockContext returns the lock context of a hold taken with ctx, and the
// function that ends it (give it to NewHold). The lock context keeps ctx's
// values but not its cancellation or deadline: ctx bounds the wait for the
// hold, and the lock context ends exactly when the hold does (Hold.End), so a
// holder can always tell whether it still holds, whatever became of the
// context it asked with.
func LockContext(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	return context.WithCancelCause(context.WithoutCancel(ctx))
}

// Dropped describes a hold to give back if the program drops its lock context
// without releasing it (see WatchDrop).
type Dropped struct {
	What  string // "mutex", "read lock", "semaphore"...: for the log line
	Name  string // the lock's name
	Owner string // owner field or permit id in Redis
	// Release releases the hold (every level of it), with its own bound (the
	// unlock timeout). It reports whether it released a hold that was still
	// live; false with a nil error when the hold had ended meanwhile.
	Release func() (released bool, err error)
	// Hold is the hold, when it is one Hold: its end stops the watch, so
	// that the lock contexts of holds that were released (nearly all of
	// them) cost the runtime nothing when they are collected.
	Hold *Hold
	// Holds, for a hold made of several (a MultiLock's members, a quorum
	// lock's masters), are those holds: as Hold, they tell a fixed lease.
	Holds []*Hold
}

// fixedLease reports whether every hold of d has a fixed lease (WithLease)
// now: such a hold ends by itself when its lease runs out, in Redis and in
// the Client (its expiry timer), so a dropped lock context is left to it.
// Taking a lock with a lease and letting it expire is an idiom ("at most
// once per lease"); only the watchdog would keep a dropped hold for ever.
func (d *Dropped) fixedLease() bool {
	holds := d.Holds
	if d.Hold != nil {
		holds = []*Hold{d.Hold}
	}
	some := false
	for _, h := range holds {
		if h == nil {
			continue
		}
		if _, renewed := h.Lease(); renewed {
			return false
		}
		some = true
	}
	return some
}

// WatchDrop arranges for d.Release to run, in the background (see Go), once
// link is unreachable, and logs it: without it, a hold whose lock context the
// program dropped without Unlock (a `defer Unlock(ctx)` given the wrong
// context, say) would be renewed by the watchdog until the process exits. A
// hold that has a fixed lease by then is left to its lease (see fixedLease).
//
// link must be the value that carries the hold in the lock context, reachable
// only through that context (and contexts derived from it): nothing the
// Client keeps (the registry of holds, the watchdog, a cohort, the hold's
// cancel function) may reference it, and d must not either, or it is never
// collected. A context derived from the lock context that is still live (a
// context.WithCancel child never cancelled, an AfterFunc never stopped) keeps
// it reachable, as it should: the hold can still be released through it.
func WatchDrop[T any](c *Client, link *T, d *Dropped) {
	watch := runtime.AddCleanup(link, c.dropped, d)
	if h := d.Hold; h != nil {
		h.mu.Lock()
		ended := h.ended
		if !ended {
			h.dropWatches = append(h.dropWatches, watch)
		}
		h.mu.Unlock()
		if ended {
			watch.Stop()
		}
	}
}

// dropped releases a hold whose lock context became unreachable. It runs on
// the runtime's cleanup goroutine, so the release goes to the background.
func (c *Client) dropped(d *Dropped) {
	if d.Hold != nil {
		if ended, _ := d.Hold.State(); ended {
			return // stopped too late: nothing to give back
		}
	}
	if d.fixedLease() {
		return
	}
	c.Go(func() { // false once Close ended every hold: nothing to do
		released, err := d.Release()
		switch {
		case err != nil:
			c.Logger().Warn("relock: a lock context was dropped without Unlock, and releasing its hold failed; it expires with its lease",
				"lock", d.Name, "kind", d.What, "owner", d.Owner, "error", err)
		case released:
			c.Logger().Warn("relock: a lock context was dropped without Unlock; its hold was released",
				"lock", d.Name, "kind", d.What, "owner", d.Owner)
		}
	})
}

// Logger is where the Client logs (Config.Logger, else slog.Default at the
// time of the call).
func (c *Client) Logger() *slog.Logger {
	if c.Cfg.Logger != nil {
		return c.Cfg.Logger
	}
	return slog.Default()
}
