package mux

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// WakeAll is the message payload that wakes every Waiter of a channel. Other
// payloads are budgets (see package pubsub).
const WakeAll = "*"

// Multiplexer shares a few dedicated pub/sub connections among all Waiters of
// a client. Create one per rueidis.Client with New; it is safe for concurrent
// use. Connections are opened on the first Subscribe.
type Multiplexer struct {
	client rueidis.Client
	cfg    Config
	seed   maphash.Seed
	conns  []*conn

	ctx       context.Context // cancelled by Close: aborts commands in flight
	cancel    context.CancelFunc
	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup

	messages atomic.Int64 // messages received, on every connection
	mode     atomic.Int32 // modeUnknown until Sharded decides
}

// New returns a Multiplexer over client, configured by opts (package
// pubsub's Options, which check their values; nil ones are skipped). It does
// not talk to Redis until the first Subscribe.
func New[O Option](client rueidis.Client, opts ...O) (*Multiplexer, error) {
	if client == nil {
		return nil, InvalidOptionf("pubsub: nil rueidis client")
	}
	cfg := DefaultConfig()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Sharding == ShardingSharded && client.Mode() != rueidis.ClientModeCluster {
		return nil, InvalidOptionf("pubsub: sharded pub/sub needs a Redis Cluster client, got mode %v", client.Mode())
	}
	m := &Multiplexer{client: client, cfg: cfg, seed: maphash.MakeSeed(), closed: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.conns = make([]*conn, cfg.Connections)
	for i := range m.conns {
		m.conns[i] = newConn(m)
	}
	return m, nil
}

// unusable reports a Multiplexer not made by New (nil, or a zero value):
// it behaves as a closed one, and its methods return errNotNew.
func (m *Multiplexer) unusable() bool { return m == nil || m.closed == nil }

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
	if err := m.SubscribeInto(ctx, w, channel, weight); err != nil {
		return nil, err
	}
	return w, nil
}

// SubscribeInto is SubscribeWeighted for a Waiter that the caller allocated
// (package pubsub's Waiter holds one by value, which saves an allocation per
// wait); w must be zero, and is unused after an error. Its arguments are
// checked before anything is queued.
func (m *Multiplexer) SubscribeInto(ctx context.Context, w *Waiter, channel string, weight int64) error {
	switch {
	case ctx == nil:
		return errNilContext("Subscribe")
	case w == nil:
		return fmt.Errorf("%w: Subscribe: nil Waiter", ErrInvalidOption)
	case m.unusable():
		return errNotNew
	case channel == "":
		return ErrInvalidChannel
	}
	if weight < 1 {
		weight = 1
	}
	if _, err := m.Sharded(ctx); err != nil {
		return err
	}
	c := m.connFor(channel)
	ready, err := c.join(w, channel, weight)
	if err != nil {
		return err
	}
	select {
	case <-ready:
		c.mu.Lock()
		err := w.entry.err
		c.mu.Unlock()
		if err != nil {
			w.Leave(true)
			return err
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		last := w.entry.lastErr
		c.mu.Unlock()
		w.Leave(false)
		if last != nil {
			return fmt.Errorf("pubsub: subscribe %q: %w (last error: %w)", channel, ctx.Err(), last)
		}
		return ctx.Err()
	case <-m.closed:
		w.Leave(false)
		return ErrClosed
	}
}

// SubscribeIfLive queues a new Waiter on channel, as SubscribeWeighted does,
// only when the channel's subscription is live: confirmed by Redis on the
// current connection (other Waiters are on it, or it lingers). It never waits
// and sends nothing; it returns nil when the channel is not subscribed, is
// being resubscribed after a reconnect, or m is closed (or not made by New).
func (m *Multiplexer) SubscribeIfLive(channel string, weight int64) *Waiter {
	if channel == "" || m.unusable() {
		return nil
	}
	return m.connFor(channel).joinIfLive(channel, max(weight, 1))
}

// Waiting returns how many Waiters are queued on channel in this process
// (0 for a Multiplexer not made by New).
func (m *Multiplexer) Waiting(channel string) int {
	if m.unusable() {
		return 0
	}
	c := m.connFor(channel)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[channel]; e != nil {
		return e.n
	}
	return 0
}

func (m *Multiplexer) connFor(channel string) *conn {
	if len(m.conns) == 1 {
		return m.conns[0]
	}
	return m.conns[maphash.String(m.seed, channel)%uint64(len(m.conns))]
}

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
func (m *Multiplexer) Stats() Stats {
	if m.unusable() {
		return Stats{}
	}
	s := Stats{Messages: m.messages.Load()}
	for _, c := range m.conns {
		c.mu.Lock()
		s.Channels += len(c.entries)
		for _, e := range c.entries {
			s.Waiters += e.n
		}
		s.Reconnects += c.reconnects
		c.mu.Unlock()
	}
	return s
}

// Close stops every connection and wakes all Waiters (their Done channel is
// closed). It waits for the connection goroutines to exit and is idempotent.
// On a Multiplexer not made by New it does nothing.
func (m *Multiplexer) Close() {
	if m.unusable() {
		return
	}
	m.closeOnce.Do(func() {
		close(m.closed)
		m.cancel()
		for _, c := range m.conns {
			// A join that saw the Multiplexer open has finished its wg.Add
			// once we get the lock.
			c.mu.Lock()
			c.mu.Unlock() //nolint:staticcheck // empty critical section is the point
		}
	})
	m.wg.Wait()
}
