package pubsub

// Waiter is one goroutine's place in the queue of a channel. It is created by
// Multiplexer.Subscribe and must be left with Leave exactly once.
//
// A Waiter is used by a single goroutine; C may be read while the Multiplexer
// delivers signals concurrently.
type Waiter struct {
	wake   chan struct{} // buffered 1: a signal is never lost, and never piles up
	weight int64
	tag    string // guarded by conn.mu
	data   string // payload of the last addressed message, guarded by conn.mu
	entry  *entry
	conn   *conn
	// Links of the channel's FIFO queue, guarded by conn.mu.
	prev, next *Waiter
	left       bool
	deaf       bool // takes no budget (see IgnoreBudget), guarded by conn.mu
}

// C receives a value when the Waiter should re-check the resource it waits
// for: a message on its channel chose it, or the connection was re-established
// after messages may have been lost, or the Multiplexer closed. It is also
// closed to nothing: the channel is never closed.
func (w *Waiter) C() <-chan struct{} { return w.wake }

// Done is closed when the Multiplexer is closed; waiting any longer is futile.
func (w *Waiter) Done() <-chan struct{} { return w.conn.mux.closed }

// Leave removes the Waiter from its channel's queue; the last Waiter leaving a
// channel unsubscribes it (after the linger). satisfied tells whether the
// Waiter got what it waited for. A Waiter that leaves unsatisfied, for example
// because its context ended, hands its turn to the next Waiter in line, so that a
// release it was woken for is not lost with it.
// Leave is idempotent.
func (w *Waiter) Leave(satisfied bool) {
	w.conn.leave(w, satisfied)
}

// SetTag names the Waiter so that a message "@" + tag on its channel wakes it,
// and only it: how a Redis-side queue hands a release to the waiter at its head,
// wherever that waiter lives. An empty tag removes the name. Changing the tag
// discards the data of messages addressed to the former one (see Data).
func (w *Waiter) SetTag(tag string) {
	w.conn.mu.Lock()
	if w.tag != tag {
		w.data = ""
	}
	w.tag = tag
	w.conn.mu.Unlock()
}

// TakeData returns and clears the data of the last message addressed to the
// Waiter's tag: a message "@" + tag + " " + data (see AddressDataSeparator)
// stores data before it wakes the Waiter, so a Redis-side queue can hand the
// resource itself (a lock granted, with its fencing token) along with the
// wake-up. It returns "" when no such message came since the last call.
func (w *Waiter) TakeData() string {
	w.conn.mu.Lock()
	d := w.data
	w.data = ""
	w.conn.mu.Unlock()
	return d
}

// Notify wakes the Waiter as a message chosen for it would (C receives a
// value unless a wake is already pending): for a process-local event that the
// waiting goroutine must look at. Safe from any goroutine.
func (w *Waiter) Notify() { w.signal() }

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

// IgnoreBudget makes the Waiter pass over budget messages (see the package
// documentation): only a message addressed to its tag, WakeAll, a reconnect or
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
	w.conn.mu.Lock()
	defer w.conn.mu.Unlock()
	return !w.left && w.entry.confirmed && w.conn.entries[w.entry.channel] == w.entry
}
