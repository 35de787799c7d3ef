package core

import (
	"context"
	"sync"
	"time"
)

// Kind is what a primitive contributes to its holds: how to renew a batch of
// them. Renew returns 1 for each hold whose lease was extended to lease and 0
// for each hold that is gone in Redis.
type Kind struct {
	Name  string
	Renew func(ctx context.Context, c *Client, holds []*Hold, lease time.Duration) ([]int64, error)
}

// Hold is one owner's possession of a lock or of permits, from acquisition to
// release or loss. Its lock context is cancelled when it ends.
type Hold struct {
	c      *Client
	kind   *Kind
	Owner  string // owner field or permit id in Redis
	Key    string // the key its Kind renews
	Token  uint64 // fencing token, when the primitive has one
	cancel context.CancelCauseFunc

	// Serial serialises the calls that change the hold count (re-entry,
	// release) of one hold, so that the count known here is Redis's.
	Serial sync.Mutex

	mu        sync.Mutex
	lease     time.Duration
	renew     bool        // the watchdog extends it
	expiry    *time.Timer // fires when the last confirmed lease runs out
	until     time.Time   // when the last confirmed lease runs out (minus the drift margin)
	count     int64       // hold count (re-entries) as last confirmed by Redis
	releasing int         // releases in flight: a renewal that finds the hold gone is theirs to judge
	ended     bool
	cause     error
}

// DriftMargin is subtracted from a lease when computing when the holder must
// consider it gone, following the Redis documentation's allowance for clock
// drift between client and server: 1% of the lease plus 2ms.
func DriftMargin(lease time.Duration) time.Duration {
	d := lease/100 + 2*time.Millisecond
	if d >= lease {
		d = lease / 2
	}
	return d
}

// validUntil is when a lease of length lease, granted by a command sent at
// sentAt, must be taken as expired. Redis started the lease after sentAt, so
// this is no later than the server-side expiry, measured on the monotonic clock.
func validUntil(sentAt time.Time, lease time.Duration) time.Time {
	return sentAt.Add(lease - DriftMargin(lease))
}

// NewHold describes a hold; Register it, then Start it.
func (c *Client) NewHold(kind *Kind, key, owner string, token uint64, lease time.Duration, renew bool, cancel context.CancelCauseFunc) *Hold {
	return &Hold{c: c, kind: kind, Key: key, Owner: owner, Token: token, cancel: cancel, lease: lease, renew: renew}
}

// Start arms the expiry timer for a lease granted by a command sent at sentAt.
// Call it once, after Register.
func (h *Hold) Start(sentAt time.Time) {
	h.StartUntil(validUntil(sentAt, h.lease))
}

// StartUntil arms the expiry timer for a lease known to be valid until until
// (a hold taken over from another one of the same owner field). Call it once,
// after Register.
func (h *Hold) StartUntil(until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = until
	h.expiry = time.AfterFunc(time.Until(until), func() { h.End(ErrLeaseLost) })
}

// ValidUntil is when the hold's last confirmed lease runs out, less the drift
// margin: no later than Redis expires it.
func (h *Hold) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// SetCount records the hold count Redis reported.
func (h *Hold) SetCount(n int64) {
	h.mu.Lock()
	h.count = n
	h.mu.Unlock()
}

// Count is the hold count Redis last reported, and whether a release is in
// flight (the count may be about to change).
func (h *Hold) Count() (n int64, releasing bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count, h.releasing > 0
}

// Extend records that a command sent at sentAt set the lease to lease again.
func (h *Hold) Extend(sentAt time.Time, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended && h.expiry != nil {
		h.until = validUntil(sentAt, lease)
		h.expiry.Reset(time.Until(h.until))
	}
}

// gone handles a renewal that found the hold missing in Redis.
func (h *Hold) gone() {
	h.mu.Lock()
	releasing := h.releasing > 0
	h.mu.Unlock()
	if !releasing {
		h.End(ErrLeaseLost)
	}
}

// End finishes the hold once: stops its timer, unregisters it and cancels its
// context with cause.
func (h *Hold) End(cause error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.cause = true, cause
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.mu.Unlock()
	h.c.unregister(h)
	h.cancel(cause)
}

// State returns whether the hold ended and why.
func (h *Hold) State() (ended bool, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended, h.cause
}

// BeginRelease and EndRelease bracket a release in flight, during which a
// renewal that finds the hold gone does not end it: the release's answer does.
func (h *Hold) BeginRelease() {
	h.mu.Lock()
	h.releasing++
	h.mu.Unlock()
}

// EndRelease: see BeginRelease.
func (h *Hold) EndRelease() {
	h.mu.Lock()
	h.releasing--
	h.mu.Unlock()
}

// Lease returns the hold's lease and whether the watchdog renews it.
func (h *Hold) Lease() (lease time.Duration, renewed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, h.renew
}

func (h *Hold) renewable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renew && !h.ended
}

// SetFixedLease turns a watchdog hold into one with a fixed lease.
func (h *Hold) SetFixedLease(lease time.Duration) {
	h.mu.Lock()
	h.renew, h.lease = false, lease
	h.mu.Unlock()
}
