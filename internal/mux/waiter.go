package mux

import (
	"context"
)

// Waiter is one goroutine's place in the queue of a channel. It is created by
// Multiplexer.Subscribe (or SubscribeWeighted) and must be left with Leave
// when its goroutine stops waiting (Leave is idempotent).
//
// A Waiter is used by a single goroutine; C may be read while the Multiplexer
// delivers signals concurrently, and Notify may be called from any goroutine.
//
// A Waiter not made by Subscribe (nil, or a zero value) is in no queue and
// behaves as one whose Multiplexer closed: Done is closed, Err and Wait return
// an error matching ErrClosed, C never receives, and Leave, Notify do nothing.
type Waiter struct {
	wake   chan struct{} // buffered 1: a signal is never lost, and never piles up
	weight int64
	tag    string // guarded by conn.mu; see SetTag
	data   string // payload of the addressed message kept, guarded by conn.mu
	// discarded: the keep rule turned a message away while data was held;
	// followed: one was turned away while the data TakeData last returned
	// was held (see Followed). Guarded by conn.mu.
	discarded, followed bool
	// keep, when set, decides which payload the Waiter keeps (see
	// SetTagKeeping); guarded by conn.mu.
	keep  func(held, next string) bool
	entry *entry
	conn  *conn
	// Links of the channel's FIFO queue, guarded by conn.mu.
	prev, next *Waiter
	left       bool
	deaf       bool // takes no budget (see IgnoreBudget), guarded by conn.mu
}

// C receives a value when the Waiter should re-check the resource it waits
// for: a message on its channel chose it (see package pubsub for
// which Waiters a message chooses), its channel was subscribed again after
// messages may have been lost (a reconnect), Notify was called, or its
// subscription was refused for good (see Err). At most one wake is pending:
// several wakes before the Waiter reads C count as one. Wakes may be
// spurious: a re-check must not assume anything changed.
//
// C is never closed, not even by Close; select on Done as well (or use Wait),
// so as not to block forever after the Multiplexer closed.
func (w *Waiter) C() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.wake
}

// unusable reports a Waiter not made by Subscribe (nil, or a zero value).
func (w *Waiter) unusable() bool { return w == nil || w.conn == nil }

// closedChan is the Done of a Waiter not made by Subscribe.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Wait blocks until the Waiter is woken (see C), ctx is done or the
// Multiplexer is closed. It returns nil after a wake, ctx.Err() when ctx
// ended, ErrClosed after Close, and the refusal (see Err) when the wake was
// Redis refusing the channel's subscription for good. After nil the caller
// re-checks the resource it waits for, and calls Wait again if it is still
// unavailable. A nil ctx is refused at once with an error matching
// ErrInvalidOption (a pending wake stays pending); a Waiter not made by
// Subscribe returns an error matching ErrClosed.
func (w *Waiter) Wait(ctx context.Context) error {
	switch {
	case ctx == nil:
		return errNilContext("Waiter.Wait")
	case w.unusable():
		return errNotSubscribed
	}
	select {
	case <-w.wake:
		return w.Err()
	case <-ctx.Done():
		return ctx.Err()
	case <-w.Done():
		return ErrClosed
	}
}

// Err returns nil while the Waiter's subscription stands or is being restored
// (Redis busy, connection lost: the Multiplexer retries). After Redis refused
// to subscribe its channel again for good (an ACL revoked it: NOPERM), Err
// returns that refusal, wrapped in ErrSubscriptionRefused, and C will never
// receive a message: the Waiter should leave and give up or poll. After the
// Multiplexer closed, Err returns ErrClosed. A refusal wakes the Waiter on C,
// so a waiting goroutine checks Err after each wake.
func (w *Waiter) Err() error {
	if w.unusable() {
		return errNotSubscribed
	}
	w.conn.mu.Lock()
	err := w.entry.err
	w.conn.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-w.conn.mux.closed:
		return ErrClosed
	default:
		return nil
	}
}

// Done is closed when the Multiplexer is closed; waiting any longer is futile.
func (w *Waiter) Done() <-chan struct{} {
	if w.unusable() {
		return closedChan
	}
	return w.conn.mux.closed
}

// Leave removes the Waiter from its channel's queue; the last Waiter leaving a
// channel lets it go idle after the linger: its messages are ignored, and the
// subscription is dropped when the connection is next replaced, which happens
// once idle channels are as many as live ones. satisfied tells whether the
// Waiter got what it waited for. A Waiter that leaves unsatisfied, for example
// because its context ended, hands its turn to the next Waiter in line, so that a
// release it was woken for is not lost with it.
// Leave is idempotent.
func (w *Waiter) Leave(satisfied bool) {
	if w.unusable() {
		return
	}
	w.conn.leave(w, satisfied)
}

// SetTag names the Waiter so that a message AddressPrefix + tag on its
// channel wakes it, and only it among the untagged and differently tagged
// Waiters: how a Redis-side queue hands a release to the waiter at its head,
// wherever that waiter lives. An empty tag removes the name. Changing the tag
// discards the data of messages addressed to the former one (see TakeData).
func (w *Waiter) SetTag(tag string) { w.SetTagKeeping(tag, nil) }

// SetTagKeeping tags the Waiter as SetTag does and sets the rule by which it
// keeps the data of addressed messages until TakeData takes them: with keep
// nil, the last message's data (one without data leaves it); else a message
// replaces the data held only when keep(held, next) is false, and one
// without data, like every wake from a budget message or a resubscription,
// offers WakeData (a re-check now). For a queued waiter, whose channel anyone
// may publish on: a message that proves nothing must not displace one that
// does (a grant), nor one asking for an earlier re-check. keep runs on the
// connection's reading goroutine, with the connection's lock held: it must be
// quick.
func (w *Waiter) SetTagKeeping(tag string, keep func(held, next string) bool) {
	w.conn.mu.Lock()
	if w.tag != tag {
		w.data = ""
		w.discarded, w.followed = false, false
	}
	w.tag, w.keep = tag, keep
	w.conn.mu.Unlock()
}

// offer leaves data for the Waiter (see SetTagKeeping); "" for a wake without
// data. Called with conn.mu held.
func (w *Waiter) offer(data string) {
	if w.keep == nil {
		if data != "" {
			w.data = data
		}
		return
	}
	if data == "" {
		data = WakeData
	}
	if w.data == "" || !w.keep(w.data, data) {
		// What was turned away came before data, not after it.
		w.data, w.discarded = data, false
	} else {
		w.discarded = true
	}
}

// wakeNow wakes the Waiter to re-check now, as a message without data does.
// Called with conn.mu held; it reports whether a new signal was delivered.
func (w *Waiter) wakeNow() bool {
	w.offer("")
	return w.signal()
}

// TakeData returns and clears the data of the message addressed to the
// Waiter's tag that it kept (see SetTagKeeping): a message AddressPrefix +
// tag + AddressDataSeparator + data stores data before it wakes the Waiter,
// so that a Redis-side queue can hand the resource itself (a lock granted,
// with its fencing token) along with the wake-up. It returns "" when no such
// message came since the last call.
func (w *Waiter) TakeData() string {
	w.conn.mu.Lock()
	d := w.data
	w.data = ""
	w.followed, w.discarded = w.discarded, false
	w.conn.mu.Unlock()
	return d
}

// Followed reports whether a message addressed to the Waiter's tag, or a
// wake, reached it after the data TakeData last returned: one its keep rule
// turned away while that data was held, or one since. A grant taken from
// that data may have been revoked by such a message (see rlock's
// ForceUnlock), which the keep rule, as it must, did not let displace the
// grant.
func (w *Waiter) Followed() bool {
	w.conn.mu.Lock()
	defer w.conn.mu.Unlock()
	return w.followed || w.discarded || w.data != ""
}

// Notify wakes the Waiter as a message chosen for it would (C receives a
// value unless a wake is already pending): for a process-local event that the
// waiting goroutine must look at. Safe from any goroutine, also after Leave.
func (w *Waiter) Notify() {
	if w != nil {
		w.signal()
	}
}

// signal wakes the waiter unless a wake is already pending. It reports whether a
// new signal was delivered.
func (w *Waiter) signal() bool {
	select {
	case w.wake <- struct{}{}:
		return true
	default:
		return false
	}
}

// IgnoreBudget makes the Waiter pass over budget messages (see package
// pubsub): only a message addressed to its tag, WakeAll, a reconnect or
// Notify wake it. For a listener that waits for no release of its own, so
// that it never takes a wake-up meant for a waiter.
func (w *Waiter) IgnoreBudget() {
	w.conn.mu.Lock()
	w.deaf = true
	w.conn.mu.Unlock()
}

// Live reports whether the Waiter's channel is subscribed on the current
// connection: while it is, every message published on the channel reaches the
// Waiter's queue. It is false from the moment a lost connection is noticed until
// the channel is subscribed again (and every Waiter woken).
func (w *Waiter) Live() bool {
	if w.unusable() {
		return false
	}
	w.conn.mu.Lock()
	defer w.conn.mu.Unlock()
	return !w.left && w.entry.confirmed && w.conn.entries[w.entry.channel] == w.entry
}
