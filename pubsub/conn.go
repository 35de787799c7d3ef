package pubsub

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// subscribeBatch caps the channels named in one SUBSCRIBE or UNSUBSCRIBE, so
// that resubscribing thousands of channels after a reconnect stays within
// ordinary command sizes.
const subscribeBatch = 512

const minReconnectBackoff = 10 * time.Millisecond

// entry is one subscribed (or to-be-subscribed) channel and its FIFO queue of
// Waiters. All fields are guarded by conn.mu.
type entry struct {
	channel    string
	head, tail *Waiter
	n          int

	confirmed bool          // Redis confirmed the subscription on the current connection
	ready     chan struct{} // closed once confirmed (or failed)
	err       error         // set when Redis refused the subscription
	unsub     bool          // idle past its linger: unsubscribe at the next flush
	linger    *time.Timer
}

// conn owns one dedicated pub/sub connection and the channels hashed to it.
// Its goroutine (run) is the only one that sends SUBSCRIBE and UNSUBSCRIBE, so
// the two are serialised per channel and a channel's final state is always the
// last one asked for.
type conn struct {
	mux *Multiplexer

	mu         sync.Mutex
	entries    map[string]*entry
	toSub      []*entry
	toUnsub    []*entry
	started    bool
	reconnects int64

	kicks chan struct{}
}

func newConn(m *Multiplexer) *conn {
	return &conn{mux: m, entries: make(map[string]*entry), kicks: make(chan struct{}, 1)}
}

func (c *conn) kick() {
	select {
	case c.kicks <- struct{}{}:
	default:
	}
}

// join appends a new Waiter to channel's queue, creating the entry (and asking
// the connection goroutine to subscribe it) when it is the first.
func (c *conn) join(channel string, weight int64) (*Waiter, <-chan struct{}, error) {
	c.mu.Lock()
	select {
	case <-c.mux.closed:
		c.mu.Unlock()
		return nil, nil, ErrClosed
	default:
	}
	e := c.entries[channel]
	created := e == nil
	if created {
		e = &entry{channel: channel, ready: make(chan struct{})}
		c.entries[channel] = e
		c.toSub = append(c.toSub, e)
	}
	w := c.addWaiter(e, weight)
	if !c.started {
		c.started = true
		c.mux.wg.Add(1)
		go c.run()
	}
	ready := e.ready
	c.mu.Unlock()
	if created {
		c.kick()
	}
	return w, ready, nil
}

// addWaiter appends a new Waiter to e's queue and keeps e subscribed. Called
// with c.mu held.
func (c *conn) addWaiter(e *entry, weight int64) *Waiter {
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
	e.unsub = false
	w := &Waiter{wake: make(chan struct{}, 1), weight: weight, entry: e, conn: c}
	if e.tail == nil {
		e.head, e.tail = w, w
	} else {
		w.prev = e.tail
		e.tail.next = w
		e.tail = w
	}
	e.n++
	return w
}

// joinIfLive is join for a channel whose subscription is confirmed on the
// current connection; it returns nil otherwise, leaving nothing behind.
func (c *conn) joinIfLive(channel string, weight int64) *Waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.mux.closed:
		return nil
	default:
	}
	e := c.entries[channel]
	if e == nil || !e.confirmed {
		return nil
	}
	return c.addWaiter(e, weight)
}

func (c *conn) leave(w *Waiter, satisfied bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	e := w.entry
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.prev, w.next = nil, nil
	e.n--
	if !satisfied {
		// The leaver may have been woken for a release it will not act on.
		for next := e.head; next != nil; next = next.next {
			if next.signal() {
				break
			}
		}
	}
	if e.n > 0 {
		return
	}
	if c.mux.cfg.linger == 0 || !e.confirmed {
		c.markIdle(e)
		return
	}
	e.linger = time.AfterFunc(c.mux.cfg.linger, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[e.channel] == e && e.n == 0 {
			c.markIdle(e)
		}
	})
}

// markIdle queues e for unsubscription. Called with c.mu held.
func (c *conn) markIdle(e *entry) {
	e.linger = nil
	e.unsub = true
	c.toUnsub = append(c.toUnsub, e)
	c.kick()
}

// onMessage runs on rueidis's reading goroutine: it must not block.
func (c *conn) onMessage(m rueidis.PubSubMessage) {
	if tag, addressed := strings.CutPrefix(m.Message, AddressPrefix); addressed {
		tag, data, _ := strings.Cut(tag, AddressDataSeparator)
		c.wakeTagged(m.Channel, tag, data)
		return
	}
	budget, err := strconv.ParseInt(m.Message, 10, 64)
	all := m.Message == WakeAll
	if err != nil || budget < 1 {
		budget = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[m.Channel]
	if e == nil {
		return
	}
	woken := 0
	for w := e.head; w != nil; w = w.next {
		if all {
			w.signal()
			continue
		}
		if len(w.wake) > 0 || w.deaf {
			continue // already due to re-check, or a listener only
		}
		// Strict arrival order: a waiter that does not fit is not overtaken by
		// smaller ones behind it, or large requests would starve.
		if woken > 0 && w.weight > budget {
			break
		}
		w.signal()
		woken++
		if budget -= w.weight; budget <= 0 {
			break
		}
	}
}

// wakeTagged signals the Waiters of channel tagged tag that live here (a tag
// names one owner, which may listen with more than one Waiter for a moment),
// leaving data for them when there is any.
func (c *conn) wakeTagged(channel, tag, data string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[channel]; e != nil {
		for w := e.head; w != nil; w = w.next {
			if w.tag == tag {
				if data != "" {
					w.data = data
				}
				w.signal()
			}
		}
	}
}

// wakeAll signals every Waiter; used after a reconnect.
func (c *conn) wakeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		for w := e.head; w != nil; w = w.next {
			w.signal()
		}
	}
}

// run keeps a dedicated connection alive for as long as the Multiplexer is
// open, reconnecting with backoff and resubscribing everything after a loss.
func (c *conn) run() {
	defer c.mux.wg.Done()
	ctx := c.mux.ctx
	backoff := minReconnectBackoff
	reconnect := false
	for {
		connected := time.Now()
		dc, _ := c.mux.client.Dedicate()
		lost := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: c.onMessage})
		c.serve(ctx, dc, lost, reconnect)
		// Close rather than release: a connection that carried subscriptions,
		// or that stalled, must not go back to the pool, and closing does not
		// wait on a server that stopped answering.
		dc.Close()
		if ctx.Err() != nil {
			return
		}
		c.dropSubscriptions()
		reconnect = true
		// A connection that lived a while was healthy: start backing off afresh.
		// One that failed at once (server down) must not be redialled in a loop.
		if time.Since(connected) > c.mux.cfg.maxBackoff {
			backoff = minReconnectBackoff
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, c.mux.cfg.maxBackoff)
	}
}

// serve processes subscription changes on one connection until it is lost or
// the Multiplexer closes.
func (c *conn) serve(ctx context.Context, dc rueidis.DedicatedClient, lost <-chan error, reconnect bool) {
	for {
		if err := c.flush(ctx, dc); err != nil {
			return
		}
		if reconnect {
			reconnect = false
			c.mu.Lock()
			c.reconnects++
			c.mu.Unlock()
			// Messages published while we were away are lost: every waiter
			// re-checks now rather than sitting out its lease.
			c.wakeAll()
		}
		select {
		case <-c.kicks:
		case <-lost:
			return
		case <-ctx.Done():
			return
		}
	}
}

// flush sends the pending UNSUBSCRIBEs, then the pending SUBSCRIBEs. A
// connection error is returned; a Redis error on SUBSCRIBE fails the entries
// concerned (their waiters get the error) and keeps the connection.
func (c *conn) flush(ctx context.Context, dc rueidis.DedicatedClient) error {
	c.mu.Lock()
	var unsubs []string
	for _, e := range c.toUnsub {
		if c.entries[e.channel] != e || !e.unsub || e.n > 0 {
			continue // rejoined, or already dropped
		}
		delete(c.entries, e.channel)
		if e.confirmed {
			unsubs = append(unsubs, e.channel)
		}
	}
	c.toUnsub = nil
	var subs []*entry
	for _, e := range c.toSub {
		if c.entries[e.channel] == e && !e.confirmed {
			subs = append(subs, e)
		}
	}
	c.toSub = nil
	c.mu.Unlock()

	for start := 0; start < len(unsubs); start += subscribeBatch {
		batch := unsubs[start:min(start+subscribeBatch, len(unsubs))]
		if err := dc.Do(ctx, dc.B().Unsubscribe().Channel(batch...).Build()).Error(); err != nil {
			return err
		}
	}
	for start := 0; start < len(subs); start += subscribeBatch {
		batch := subs[start:min(start+subscribeBatch, len(subs))]
		names := make([]string, len(batch))
		for i, e := range batch {
			names[i] = e.channel
		}
		err := dc.Do(ctx, dc.B().Subscribe().Channel(names...).Build()).Error()
		if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis {
			c.requeue(subs[start:])
			return err
		}
		c.mu.Lock()
		for _, e := range batch {
			if err != nil {
				e.err = err
				delete(c.entries, e.channel)
			} else {
				e.confirmed = true
			}
			close(e.ready)
		}
		c.mu.Unlock()
	}
	return nil
}

func (c *conn) requeue(es []*entry) {
	c.mu.Lock()
	c.toSub = append(c.toSub, es...)
	c.mu.Unlock()
}

// dropSubscriptions forgets the lost connection's subscriptions: channels with
// waiters are queued for resubscription (new joiners wait for it), idle ones
// are dropped.
func (c *conn) dropSubscriptions() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.toSub, c.toUnsub = c.toSub[:0], nil
	for ch, e := range c.entries {
		if e.n == 0 {
			if e.linger != nil {
				e.linger.Stop()
			}
			delete(c.entries, ch)
			continue
		}
		if e.confirmed {
			e.confirmed = false
			e.ready = make(chan struct{})
		}
		c.toSub = append(c.toSub, e)
	}
}
