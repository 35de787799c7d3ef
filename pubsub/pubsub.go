package pubsub

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/mux"
)

// The types here wrap those of internal/mux, which implements them and which
// this module's lock packages use directly; each method is a plain call, so
// that the public API costs nothing over the internal one.

// WakeAll is the message payload that wakes every Waiter of a channel. Other
// payloads are budgets (see the package documentation).
const WakeAll = "*"

// Multiplexer shares a few dedicated pub/sub connections among all Waiters of
// a client. Create one per rueidis.Client with New; it is safe for concurrent
// use. Connections are opened on the first Subscribe.
//
// A Multiplexer not made by New (nil, or a zero value) behaves as a closed
// one: Subscribe and Sharded return an error matching ErrClosed that says so,
// Close does nothing, Stats and Waiting report nothing.
type Multiplexer struct {
	m *mux.Multiplexer
}

// mux returns the implementation, nil for a Multiplexer not made by New
// (whose methods, in package mux, then behave as closed).
func (m *Multiplexer) mux() *mux.Multiplexer {
	if m == nil {
		return nil
	}
	return m.m
}

// New returns a Multiplexer over client. It does not talk to Redis until the
// first Subscribe.
func New(client rueidis.Client, opts ...Option) (*Multiplexer, error) {
	m, err := mux.New(client, opts...)
	if err != nil {
		return nil, err
	}
	return &Multiplexer{m: m}, nil
}

// Subscribe queues a new Waiter on channel with weight 1. See SubscribeWeighted.
func (m *Multiplexer) Subscribe(ctx context.Context, channel string) (*Waiter, error) {
	return m.SubscribeWeighted(ctx, channel, 1)
}

// SubscribeWeighted queues a new Waiter on channel and returns once Redis has
// confirmed the channel's subscription: any message published afterwards reaches
// the Waiter's queue. weight is what the Waiter needs from a message's budget
// (the permits it asks for); values below 1 count as 1.
//
// While Redis answers with a transient error (BUSY while a script runs,
// LOADING, MASTERDOWN, TRYAGAIN, NOAUTH or WRONGPASS while credentials are
// rotated) or cannot be reached, it keeps retrying with backoff until ctx
// ends; ctx's error is then returned wrapped together with the last such
// error, so that errors.Is(err, context.DeadlineExceeded) holds and the
// caller can still tell a busy or unreachable Redis from a quiet one. A
// permanent refusal (NOPERM for a channel the ACL denies) is returned at once,
// wrapped in ErrSubscriptionRefused.
//
// A nil ctx is refused at once with an error matching ErrInvalidOption; a
// Multiplexer not made by New (a zero value) returns an error matching
// ErrClosed. On error (ctx nil or done, Multiplexer closed, subscription
// refused) it returns a nil Waiter and nothing is left behind: no Waiter is
// queued and no channel counted.
func (m *Multiplexer) SubscribeWeighted(ctx context.Context, channel string, weight int64) (*Waiter, error) {
	w := new(Waiter)
	if err := m.mux().SubscribeInto(ctx, &w.w, channel, weight); err != nil {
		return nil, err
	}
	return w, nil
}

// Waiting returns how many Waiters are queued on channel in this process
// (0 for a Multiplexer not made by New).
func (m *Multiplexer) Waiting(channel string) int { return m.mux().Waiting(channel) }

// Stats is a snapshot of the Multiplexer's bookkeeping.
type Stats struct {
	Channels   int   // channels subscribed or being subscribed, lingering ones included
	Waiters    int   // Waiters queued
	Reconnects int64 // connections re-established after a loss
	// Messages counts the messages received since New, on any channel,
	// whether or not they woke a Waiter.
	Messages int64
}

// Stats returns current counts; cheap enough for metrics scraping. A
// Multiplexer not made by New has none (zero Stats).
func (m *Multiplexer) Stats() Stats { return Stats(m.mux().Stats()) }

// Sharded reports whether the Multiplexer subscribes with SSUBSCRIBE, so
// that publishers must use SPUBLISH (see PublishCommand). Under ShardingAuto
// on a cluster client the first call asks the server its version (INFO
// server), retrying transient failures until ctx ends; the answer is kept.
// A nil ctx is refused with an error matching ErrInvalidOption, and a
// Multiplexer not made by New returns an error matching ErrClosed; the bool
// is then false.
func (m *Multiplexer) Sharded(ctx context.Context) (bool, error) { return m.mux().Sharded(ctx) }

// PublishCommand returns "SPUBLISH" when the Multiplexer is sharded, else
// "PUBLISH": the command (or the redis.call of a script) that reaches its
// Waiters. When the mode is not known yet it is detected within ctx; if that
// fails (Redis unreachable) "PUBLISH" is returned: a message published so may
// be missed by sharded Waiters, which is safe only where, as in this module's
// locks, messages merely wake and every wait also re-checks on a timer. With
// a nil ctx nothing is detected: the mode if known, else "PUBLISH".
func (m *Multiplexer) PublishCommand(ctx context.Context) string {
	return m.mux().PublishCommand(ctx)
}

// Close stops every connection and wakes all Waiters (their Done channel is
// closed). It waits for the connection goroutines to exit and is idempotent.
// On a Multiplexer not made by New it does nothing.
func (m *Multiplexer) Close() { m.mux().Close() }

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
	w mux.Waiter // by value: one allocation per Subscribe, as for the lock packages
}

// mux returns the implementation, nil for a nil Waiter (whose methods, in
// package mux, then behave as a zero Waiter's).
func (w *Waiter) mux() *mux.Waiter {
	if w == nil {
		return nil
	}
	return &w.w
}

// C receives a value when the Waiter should re-check the resource it waits
// for: a message on its channel chose it (see the package documentation for
// which Waiters a message chooses), its channel was subscribed again after
// messages may have been lost (a reconnect), Notify was called, or its
// subscription was refused for good (see Err). At most one wake is pending:
// several wakes before the Waiter reads C count as one. Wakes may be
// spurious: a re-check must not assume anything changed.
//
// C is never closed, not even by Close; select on Done as well (or use Wait),
// so as not to block forever after the Multiplexer closed.
func (w *Waiter) C() <-chan struct{} { return w.mux().C() }

// Wait blocks until the Waiter is woken (see C), ctx is done or the
// Multiplexer is closed. It returns nil after a wake, ctx.Err() when ctx
// ended, ErrClosed after Close, and the refusal (see Err) when the wake was
// Redis refusing the channel's subscription for good. After nil the caller
// re-checks the resource it waits for, and calls Wait again if it is still
// unavailable. A nil ctx is refused at once with an error matching
// ErrInvalidOption (a pending wake stays pending); a Waiter not made by
// Subscribe returns an error matching ErrClosed.
func (w *Waiter) Wait(ctx context.Context) error { return w.mux().Wait(ctx) }

// Err returns nil while the Waiter's subscription stands or is being restored
// (Redis busy, connection lost: the Multiplexer retries). After Redis refused
// to subscribe its channel again for good (an ACL revoked it: NOPERM), Err
// returns that refusal, wrapped in ErrSubscriptionRefused, and C will never
// receive a message: the Waiter should leave and give up or poll. After the
// Multiplexer closed, Err returns ErrClosed. A refusal wakes the Waiter on C,
// so a waiting goroutine checks Err after each wake.
func (w *Waiter) Err() error { return w.mux().Err() }

// Done is closed when the Multiplexer is closed; waiting any longer is futile.
func (w *Waiter) Done() <-chan struct{} { return w.mux().Done() }

// Leave removes the Waiter from its channel's queue; the last Waiter leaving a
// channel lets it go idle after the linger: its messages are ignored, and the
// subscription is dropped when the connection is next replaced, which happens
// once idle channels are as many as live ones. satisfied tells whether the
// Waiter got what it waited for. A Waiter that leaves unsatisfied, for example
// because its context ended, hands its turn to the next Waiter in line, so that a
// release it was woken for is not lost with it.
// Leave is idempotent.
func (w *Waiter) Leave(satisfied bool) { w.mux().Leave(satisfied) }

// Notify wakes the Waiter as a message chosen for it would (C receives a
// value unless a wake is already pending): for a process-local event that the
// waiting goroutine must look at. Safe from any goroutine, also after Leave.
func (w *Waiter) Notify() { w.mux().Notify() }

// Live reports whether the Waiter's channel is subscribed on the current
// connection: while it is, every message published on the channel reaches the
// Waiter's queue. It is false from the moment a lost connection is noticed until
// the channel is subscribed again (and every Waiter woken).
func (w *Waiter) Live() bool { return w.mux().Live() }
