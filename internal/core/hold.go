package core

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/relockio/relock/internal/lua"
)

// Kind is what a primitive contributes to its holds: how to renew a batch of
// them. The watchdog runs Script on the KEYS and ARGV that Args returns for a
// batch (all of one cluster slot on a cluster client); Script returns one
// entry per hold of the batch, in order: 1 when its lease was extended to
// lease, 0 when it is gone in Redis, -1 when its renewal met an error of its
// own and changed nothing of it (see applyRenewals).
type Kind struct {
	Name   string
	Script *lua.Pipelined
	Args   func(holds []*Hold, lease time.Duration) (keys, args []string)
	// LeaseLost is the cause of a hold of this kind that ended without its
	// release: a sentinel of the primitive's package that matches
	// ErrLeaseLost (see Rebrand). Nil means ErrLeaseLost itself.
	LeaseLost error
}

// leaseLost is the cause of h ending without its release.
func (h *Hold) leaseLost() error {
	if h.kind != nil && h.kind.LeaseLost != nil {
		return h.kind.LeaseLost
	}
	return ErrLeaseLost
}

// Hold is one owner's possession of a lock or of permits, from acquisition to
// release or loss. Its lock context is cancelled when it ends.
//
// What the Client believes of a hold never outruns Redis:
//   - Validity is dated from the first send of the command whose result it
//     records (a Ticket), never from a retry or from the reply: Redis ran the
//     command after it was sent, so its lease runs out later than we think.
//   - Sending a command that may shorten the lease shortens the validity at
//     once, before its reply: the command may run even if its reply is lost.
//   - Results apply in the order their commands were sent (a per-hold
//     generation): a reply that arrives after a newer one is ignored, and a
//     renewal result never applies to a hold that stopped being renewed.
//   - A hold is confirmed while no connection error was seen since the command
//     that last confirmed it was sent (see Client.Epoch); an unconfirmed hold
//     may be gone in Redis without the Client knowing (a restart, ForceUnlock),
//     so it passes nothing on locally until Redis confirms it again.
type Hold struct {
	c     *Client
	kind  *Kind
	owner string // owner field or permit id in Redis
	key   string // the key its Kind renews
	token uint64 // fencing token, when the primitive has one
	name  string // the lock's or semaphore's name, for metrics
	since time.Time
	// lateAttempts: an acquisition attempt of this owner field may still
	// run in Redis (its reply was lost), so freeing the field must leave a
	// tombstone against it.
	lateAttempts bool
	giveBack     func(ctx context.Context, h *Hold) error // see HoldSpec.GiveBack
	ctx          context.Context                          // see HoldSpec.Ctx
	cancel       context.CancelCauseFunc

	// serial serialises the calls that change the hold count (re-entry,
	// release) of one hold, so that the count known here is Redis's.
	serial sync.Mutex

	mu        sync.Mutex
	lease     time.Duration
	maxLease  time.Duration // longest lease any command of this hold may have set
	renew     bool          // the watchdog extends it
	expiry    *time.Timer   // fires when the last confirmed lease runs out
	until     time.Time     // when the last confirmed lease runs out (minus the drift margin)
	sent      uint64        // generation of the last command sent
	applied   uint64        // generation of the last result applied
	epoch     uint64        // Client epoch at the send of the last confirming command
	doubt     bool          // told it may be gone (see Doubt) since its last confirmation
	count     int64         // hold count (re-entries) as last confirmed by Redis
	releasing int           // releases in flight: a renewal that finds the hold gone is theirs to judge
	claim     time.Duration // claim window its lease in Redis may still be (see claim.go); 0: none
	claimDue  time.Time     // when to send the early renewal that ends the claim
	ended     bool
	cause     error
	// dropWatches are the drop watches of the hold's lock contexts (see
	// WatchDrop; a re-entry adds one), stopped when the hold ends: an ended
	// hold has nothing to give back.
	dropWatches []runtime.Cleanup
	// onEnd runs when the hold ends (see OnEnd).
	onEnd func()
}

// Ticket dates one command that sets a hold's lease: when it was first sent,
// its place in the hold's order of commands, and the Client's epoch then.
// Take it once per command, before the first send, and keep it across retries.
type Ticket struct {
	gen   uint64
	at    time.Time
	epoch uint64
}

// At is when the command was first sent.
func (t Ticket) At() time.Time { return t.at }

// NewTicket dates a command that is not yet a hold's (an acquisition): it
// becomes the hold's first result through Start.
func (c *Client) NewTicket() Ticket {
	return Ticket{at: time.Now(), epoch: c.Epoch()}
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

// HoldSpec is what a hold is made of; it does not change once the hold is
// made (see NewHold).
type HoldSpec struct {
	Kind             *Kind
	Name, Key, Owner string
	Token            uint64 // fencing token, when the primitive has one
	Lease            time.Duration
	Renew            bool  // the watchdog renews it
	Count            int64 // hold count (re-entries); 0: the kind counts none
	LateAttempts     bool  // see Hold.LateAttempts
	Ctx              context.Context
	Cancel           context.CancelCauseFunc
	// Ctx is the context that End cancels (see LockContext), without the
	// value that carries the hold: what a context.AfterFunc may wait on
	// without keeping the lock context, which WatchDrop watches, reachable.
	// Cancel cancels it.
	//
	// GiveBack, if not nil, frees the hold's owner field in Redis: an
	// owner-checked abandon, idempotent, that frees it whether or not a
	// command that extended its lease ran. It runs in the background when
	// the hold lapses while such a command may have run (see lapse), and
	// when Close ends the hold.
	GiveBack func(ctx context.Context, h *Hold) error
}

// NewHold makes a hold as spec says; Register it, then Start it.
func (c *Client) NewHold(spec HoldSpec) *Hold {
	h := &Hold{c: c, kind: spec.Kind, name: spec.Name, key: spec.Key, owner: spec.Owner, token: spec.Token,
		lateAttempts: spec.LateAttempts, giveBack: spec.GiveBack, ctx: spec.Ctx, cancel: spec.Cancel,
		lease: spec.Lease, maxLease: spec.Lease, renew: spec.Renew, count: spec.Count, since: time.Now()}
	if h.cancel == nil {
		h.cancel = func(error) {}
	}
	return h
}

// Owner is the hold's owner field (or permit id) in Redis.
func (h *Hold) Owner() string { return h.owner }

// Key is the key the hold's Kind renews.
func (h *Hold) Key() string { return h.key }

// Token is the hold's fencing token (0: the primitive has none).
func (h *Hold) Token() uint64 { return h.token }

// Name is the lock's or semaphore's name.
func (h *Hold) Name() string { return h.name }

// LateAttempts tells that an acquisition attempt of the owner field may
// still run in Redis (its reply was lost): freeing the field must leave a
// tombstone against it.
func (h *Hold) LateAttempts() bool { return h.lateAttempts }

// Ctx is the context End cancels (see HoldSpec.Ctx); nil if none was given.
func (h *Hold) Ctx() context.Context { return h.ctx }

// Serialize begins a change of the hold count (a re-entry, a release), one
// at a time per hold, so that the count known here is Redis's; call the
// function it returns when the change is done.
func (h *Hold) Serialize() (done func()) {
	h.serial.Lock()
	return h.serial.Unlock
}

// freeInBackground runs the hold's GiveBack in the background, retried for
// up to the unlock timeout.
func (h *Hold) freeInBackground() {
	if h.giveBack == nil {
		return
	}
	c := h.c
	c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
		_ = RetryTransient(ctx, func() error { return h.giveBack(ctx, h) })
	})
}

// Start arms the expiry timer for the lease granted by the acquisition dated
// by t. Call it once, after Register.
func (h *Hold) Start(t Ticket) {
	h.StartFrom(validUntil(t.at, h.lease), t.epoch)
}

// StartFrom arms the expiry timer for a lease known to be valid until until,
// confirmed by a command sent in Client epoch epoch (a hold taken over from
// another one of the same owner field). Call it once, after Register.
func (h *Hold) StartFrom(until time.Time, epoch uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until, h.epoch = until, epoch
	h.expiry = time.AfterFunc(time.Until(until), h.lapse)
}

// lapse ends h when its last confirmed lease ran out. A command sent since
// (a claim extension or renewal whose reply came late or was lost) may have
// extended that lease in Redis: with nothing to give it back, the lock would
// stay held by no one for up to the extended lease. A release in flight
// answers for itself (see Unlock).
func (h *Hold) lapse() {
	h.mu.Lock()
	if h.ended || time.Now().Before(h.until) {
		h.mu.Unlock() // extended as the timer fired: it is armed again
		return
	}
	unsure := h.sent > h.applied && h.releasing == 0
	h.mu.Unlock()
	if h.end(h.leaseLost()) && unsure {
		h.freeInBackground()
	}
}

// ValidUntil is when the hold's last confirmed lease runs out, less the drift
// margin: no later than Redis expires it.
func (h *Hold) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// Confirmed reports whether no connection error was seen since the command
// that last confirmed the hold was sent, and the epoch of that command.
func (h *Hold) Confirmed() (ok bool, epoch uint64) {
	h.mu.Lock()
	epoch, doubt := h.epoch, h.doubt
	h.mu.Unlock()
	return !doubt && epoch == h.c.Epoch(), epoch
}

// Doubt records a hint that the hold may be gone in Redis (a message said so,
// which anyone could have sent): it is unconfirmed until the next result of a
// command sent after now is applied.
func (h *Hold) Doubt() {
	h.mu.Lock()
	h.doubt = true
	h.sent++ // results of commands sent before the hint confirm nothing
	h.applied = h.sent
	h.mu.Unlock()
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

// Send dates a command about to be sent that sets the hold's lease to lease
// if it runs. The validity is shortened at once to what that lease allows,
// since the command may run even if its reply is lost.
func (h *Hold) Send(lease time.Duration) Ticket {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sendLocked(lease)
}

func (h *Hold) sendLocked(lease time.Duration) Ticket {
	h.sent++
	t := Ticket{gen: h.sent, at: time.Now(), epoch: h.c.Epoch()}
	h.maxLease = max(h.maxLease, lease)
	if u := validUntil(t.at, lease); !h.ended && h.expiry != nil && u.Before(h.until) {
		h.until = u
		h.expiry.Reset(time.Until(u))
	}
	return t
}

// Extend records that the command dated by t set the lease to lease. It is
// ignored (and reports false) when a result of a later command was applied
// already, or the hold ended.
func (h *Hold) Extend(t Ticket, lease time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.extendLocked(t, lease)
}

func (h *Hold) extendLocked(t Ticket, lease time.Duration) bool {
	if h.ended || h.expiry == nil || t.gen <= h.applied {
		return false
	}
	h.applied = t.gen
	h.until = validUntil(t.at, lease)
	h.claim = 0 // whatever set lease ended the claim
	h.expiry.Reset(time.Until(h.until))
	h.epoch = max(h.epoch, t.epoch)
	h.doubt = false
	return true
}

// Kept records that the release dated by t left levels of the hold in
// Redis, their lease set to lease (see Extend). When the hold ended here
// while the release was in flight (it lapsed, see lapse, which leaves a
// release in flight to answer for itself), no one holds those levels any
// more: they are given back, rather than left held for a whole lease.
func (h *Hold) Kept(t Ticket, lease time.Duration) {
	h.mu.Lock()
	ok := h.extendLocked(t, lease)
	ended := h.ended
	h.mu.Unlock()
	if !ok && ended {
		h.freeInBackground()
	}
}

// sendRenewal dates a watchdog renewal; ok is false when the hold is no
// longer the watchdog's to renew.
func (h *Hold) sendRenewal(lease time.Duration) (t Ticket, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.renew || h.ended {
		return Ticket{}, false
	}
	return h.sendLocked(lease), true
}

// renewed applies a watchdog renewal's result, unless the hold stopped being
// renewed since (its lease is now fixed, or it was given up).
func (h *Hold) renewed(t Ticket, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.renew {
		h.extendLocked(t, lease)
	}
}

// gone handles a renewal that found the hold missing in Redis.
func (h *Hold) gone() {
	h.mu.Lock()
	releasing := h.releasing > 0
	h.mu.Unlock()
	if !releasing {
		h.End(h.leaseLost())
	}
}

// End finishes the hold once: stops its timer, unregisters it and cancels its
// context with cause.
func (h *Hold) End(cause error) { h.end(cause) }

// end is End, reporting whether this call ended the hold.
func (h *Hold) end(cause error) bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.ended, h.cause = true, cause
	h.renew = false
	started := h.expiry != nil
	if started {
		h.expiry.Stop()
	}
	watches := h.dropWatches
	h.dropWatches = nil
	onEnd := h.onEnd
	h.onEnd = nil
	h.mu.Unlock()
	for _, w := range watches {
		w.Stop()
	}
	h.c.unregister(h)
	if started {
		h.c.holdEnded(h, cause) // not an acquisition undone before Start
	}
	h.cancel(cause)
	if onEnd != nil {
		onEnd()
	}
	return true
}

// OnEnd arranges for f to run once the hold ends, in the goroutine that ends
// it, after its context is cancelled; at once when it has ended already. It
// costs neither a goroutine nor a context registration, as
// context.AfterFunc on the hold's context would, for what nearly every hold
// does when it ends. f must not block, nor take a lock that a caller of End
// may hold: End is called from Unlock, the watchdog, the lease timer and
// Close.
func (h *Hold) OnEnd(f func()) {
	h.mu.Lock()
	if !h.ended {
		if prev := h.onEnd; prev != nil {
			h.onEnd = func() { prev(); f() }
		} else {
			h.onEnd = f
		}
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	f()
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

// SetLease sets the hold's lease and whether the watchdog renews it. Call it
// before sending the command that sets that lease: no renewal sent after it,
// nor the result of one sent before, then extends a hold no longer renewed.
func (h *Hold) SetLease(lease time.Duration, renew bool) {
	h.mu.Lock()
	if !h.ended {
		h.renew, h.lease = renew, lease
	}
	h.mu.Unlock()
}
