package core

import (
	"context"
	"time"
)

// A release of one level of a hold (Unlock, RUnlock, Release) runs through
// these states; Run drives it, and each is a method of Release:
//
//	pass      the final level of a hold with turns: the kind hands the lock
//	          to a waiting call of this Client, or keeps it for the Client's
//	          next call (a park), with no script -> done
//	script    a round of the kind's release script, retried under one
//	          request id for up to the unlock timeout (see Releaser.Round)
//	            answered -> settle
//	            no answer in time, or refused -> abandon
//	settle    applies the answer: the hold was not held (its lease was lost)
//	          -> done, ErrNotHeld; no level left -> done, the hold ends;
//	          levels left -> done, count and lease set; the kind asks for
//	          another round (the Mutex: a lock kept for a successor that
//	          could not take it) -> script
//	abandon   the outcome stays unknown: the hold is given up (see
//	          Hold.Abandon), a clean-up retried in the background
//
// A kind supplies its pass, its script round and its clean-up (Releaser);
// the states are the same for every kind.
type Release struct {
	Hold  *Hold
	Op    string // "unlock", "release": how an AbandonError names it
	Ended error  // the cause the hold ends with when released: ErrUnlocked, ErrReleased
	Final bool   // the hold's last level (set by Run)
	Lease time.Duration
	Round int // rounds of the script so far
	// Caller: an Unlock, RUnlock or Release waits for it, bounded by the
	// unlock timeout, and Close does not: its commands run inline (see
	// bounded). Not for releases in the background, which Close cuts short.
	Caller bool
	// Abandoned: the outcome stayed unknown and a clean-up runs in the
	// background, which keeps the Releaser: a kind that recycles its release
	// state must not recycle this one.
	Abandoned bool
}

// ReleaseReply is what a round of a release script found.
type ReleaseReply struct {
	Left  int64 // levels left: 0 released, below 0 not held (the lease was lost)
	Again bool  // the kind needs another round (see settle)
	Err   error // the kind's own error, with nothing left to abandon
}

// Releaser is what a lock kind supplies to a release.
type Releaser interface {
	// Pass hands the final level on within the Client, or keeps it there
	// (turns). It reports whether the next holder took over the owner id.
	Pass(r *Release) bool
	// Round runs one round of the release script, sent at t, retrying
	// transient errors; an error means the outcome is unknown.
	Round(ctx context.Context, r *Release, t Ticket) (ReleaseReply, error)
	// Cleanup frees the hold in Redis whatever its release did: an
	// idempotent abandon, retried in the background.
	Cleanup(ctx context.Context, r *Release) error
	// NotHeld is the error of a release of a hold that ended with cause.
	NotHeld(cause error) error
	// Wrap names the call in err.
	Wrap(err error) error
}

// Run releases one level of r.Hold, one release of a hold at a time.
func (r *Release) Run(ctx context.Context, k Releaser) error {
	h := r.Hold
	defer h.Serialize()()
	if ended, cause := h.State(); ended {
		return k.NotHeld(cause)
	}
	n, releasing := h.Count()
	r.Final = n <= 1 && !releasing // (a semaphore's hold has no count)
	if r.Final && k.Pass(r) {
		h.End(r.Ended) // the next holder took over the owner id
		return nil
	}
	return r.script(ctx, k)
}

// script runs the rounds of the release script, and settles each.
func (r *Release) script(ctx context.Context, k Releaser) error {
	h := r.Hold
	h.BeginRelease()
	defer h.EndRelease()
	ctx, cancel := h.c.UnlockContext(ctx)
	defer cancel()
	if r.Caller {
		ctx = Inline(ctx)
	}
	r.Lease, _ = h.Lease()
	for ; ; r.Round++ {
		t := h.Send(r.Lease)
		reply, err := k.Round(ctx, r, t)
		if err != nil {
			return k.Wrap(r.abandon(k, err))
		}
		if again, err := r.settle(k, reply, t); !again {
			return err
		}
	}
}

func (r *Release) settle(k Releaser, reply ReleaseReply, t Ticket) (again bool, err error) {
	h := r.Hold
	switch {
	case reply.Err != nil:
		return false, k.Wrap(reply.Err)
	case reply.Again:
		return true, nil
	case reply.Left < 0:
		h.End(ErrLeaseLost)
		return false, k.NotHeld(ErrLeaseLost)
	case reply.Left == 0:
		h.End(r.Ended)
	default:
		h.SetCount(reply.Left)
		h.Kept(t, r.Lease)
	}
	return false, nil
}

func (r *Release) abandon(k Releaser, err error) error {
	r.Abandoned = true
	return r.Hold.Abandon(r.Op, err, func(ctx context.Context) error { return k.Cleanup(ctx, r) })
}
