package mux

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// subscribeBatch caps the channels named in one SUBSCRIBE, so that
// resubscribing thousands of channels after a reconnect stays within ordinary
// command sizes.
const subscribeBatch = 512

// MinReconnectBackoff is the first delay between reconnection attempts, and
// the least that pubsub.WithMaxReconnectBackoff accepts as their maximum.
const MinReconnectBackoff = 10 * time.Millisecond

// entry is one subscribed (or to-be-subscribed) channel and its FIFO queue of
// Waiters. All fields are guarded by conn.mu.
type entry struct {
	channel    string
	head, tail *Waiter
	n          int

	confirmed bool          // Redis confirmed the subscription on the current connection
	ready     chan struct{} // closed once confirmed (or refused for good)
	err       error         // set when Redis refused the subscription for good; the entry is detached
	lastErr   error         // the last transient failure met while subscribing, until confirmed
	idle      bool          // no Waiters, past the linger: retired with the connection
	wake      bool          // signal every Waiter once confirmed: messages may have been lost
	moving    bool          // being subscribed on a replacement connection (retire)
	link      *link         // sharded: the shard connection it is confirmed on
	linger    *time.Timer
}

// conn owns one dedicated pub/sub connection and the channels hashed to it.
// Its goroutine (run) is the only one that sends SUBSCRIBE (in sharded mode,
// SSUBSCRIBE is sent by the per-node jobs it starts, see runSharded).
//
// It never sends UNSUBSCRIBE: rueidis (v1.0.79) panics on its reader goroutine
// when Redis answers an UNSUBSCRIBE with BUSY (a script runs), which no recover can
// catch (see docs/upstream/rueidis-busy-unsubscribe.md). An idle channel stays
// subscribed, its messages find no Waiter, until the connection is replaced by
// a fresh one carrying only the live channels (retire).
type conn struct {
	mux *Multiplexer

	mu         sync.Mutex
	entries    map[string]*entry
	toSub      []*entry
	idle       int // confirmed entries with idle set
	started    bool
	reconnects int64

	kicks chan struct{}

	// Sharded mode (see shard.go), guarded by mu.
	slotOwner map[uint16]string // slot -> address of its master, as last learned
	// dialledNodes is what nodes said when the connection was dialled; used
	// by run's goroutine only (see await).
	dialledNodes string
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

// join sets up w, a zero Waiter, and appends it to channel's queue, creating the entry (and asking
// the connection goroutine to subscribe it) when it is the first.
func (c *conn) join(w *Waiter, channel string, weight int64) (<-chan struct{}, error) {
	c.mu.Lock()
	select {
	case <-c.mux.closed:
		c.mu.Unlock()
		return nil, ErrClosed
	default:
	}
	e := c.entries[channel]
	created := e == nil
	if created {
		e = &entry{channel: channel, ready: make(chan struct{})}
		c.entries[channel] = e
		c.toSub = append(c.toSub, e)
	}
	c.addWaiter(w, e, weight)
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
	return ready, nil
}

// addWaiter sets up w, a zero Waiter, appends it to e's queue and keeps e
// subscribed. Called with c.mu held.
func (c *conn) addWaiter(w *Waiter, e *entry, weight int64) {
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
	if e.idle {
		e.idle = false
		if e.confirmed {
			c.idle--
		}
	}
	*w = Waiter{wake: make(chan struct{}, 1), weight: weight, entry: e, conn: c}
	if e.tail == nil {
		e.head, e.tail = w, w
	} else {
		w.prev = e.tail
		e.tail.next = w
		e.tail = w
	}
	e.n++
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
	w := new(Waiter)
	c.addWaiter(w, e, weight)
	return w
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
			if next.wakeNow() {
				break
			}
		}
	}
	if e.n > 0 || c.entries[e.channel] != e {
		return // others wait, or the entry was refused and detached
	}
	if c.mux.cfg.Linger == 0 || !e.confirmed {
		c.markIdle(e)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(c.mux.cfg.Linger, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Only the entry's current linger: one that fired as a Waiter came
		// and went again is stale, and another timer now runs.
		if c.entries[e.channel] == e && e.n == 0 && e.linger == t {
			c.markIdle(e)
		}
	})
	e.linger = t
}

// markIdle marks e idle: it stays subscribed, ignored, until the connection
// is retired. Called with c.mu held.
func (c *conn) markIdle(e *entry) {
	e.linger = nil
	e.idle = true
	if e.confirmed {
		c.idle++
	}
	c.kick()
}

// deleteEntry forgets e. Called with c.mu held.
func (c *conn) deleteEntry(e *entry) {
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
	if e.idle && e.confirmed {
		c.idle--
	}
	delete(c.entries, e.channel)
}

// onMessage runs on rueidis's reading goroutine: it must not block.
func (c *conn) onMessage(m rueidis.PubSubMessage) {
	c.mux.messages.Add(1)
	c.deliver(m)
}

// deliver wakes the Waiters a message is for (see onMessage).
func (c *conn) deliver(m rueidis.PubSubMessage) {
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
			w.wakeNow()
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
		w.wakeNow()
		woken++
		if budget -= w.weight; budget <= 0 {
			break
		}
	}
}

// wakeTagged signals the Waiters of channel tagged tag that live here (a tag
// names one owner, which may listen with more than one Waiter for a moment),
// offering them the data, if any (which they keep or not by their rule, see
// Waiter.SetTagKeeping). An empty tag names no one: an
// untagged Waiter is never addressed.
func (c *conn) wakeTagged(channel, tag, data string) {
	if tag == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[channel]; e != nil {
		for w := e.head; w != nil; w = w.next {
			if w.tag == tag {
				w.offer(data)
				w.signal()
			}
		}
	}
}

// errRetired ends serve when the connection carries only idle channels: it is
// closed, and no new one is opened until a channel is wanted.
var errRetired = errors.New("pubsub: connection retired")

// run keeps a dedicated connection alive while the Multiplexer is open and
// channels are wanted, reconnecting with backoff and resubscribing everything
// after a loss.
func (c *conn) run() {
	defer c.mux.wg.Done()
	if c.mux.mode.Load() == modeSharded {
		c.runSharded()
		return
	}
	ctx := c.mux.ctx
	backoff := MinReconnectBackoff
	reconnect := false
	for {
		connected := time.Now()
		dc, lost, err := c.dial(ctx)
		if err != nil {
			return // closed while dialling
		}
		dc, err = c.serve(ctx, dc, lost, reconnect)
		// Close rather than release: a connection that carried subscriptions,
		// or that stalled, must not go back to the pool, and closing does not
		// wait on a server that stopped answering.
		dc.Close()
		if ctx.Err() != nil {
			return
		}
		c.dropSubscriptions()
		if errors.Is(err, errRetired) {
			reconnect = false
			if !c.waitForChannels(ctx) {
				return
			}
			continue
		}
		reconnect = true
		// A connection that lived a while was healthy: start backing off afresh.
		// One that failed at once (server down) must not be redialled in a loop.
		if time.Since(connected) > c.mux.cfg.MaxBackoff {
			backoff = MinReconnectBackoff
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, c.mux.cfg.MaxBackoff)
	}
}

// dial opens a dedicated connection; it fails only when ctx ends first.
func (c *conn) dial(ctx context.Context) (rueidis.DedicatedClient, <-chan error, error) {
	c.dialledNodes = c.nodes() // before Dedicate: a switch in between is seen
	dc, err := dedicate(ctx, c.mux.client)
	if err != nil {
		return nil, nil, err
	}
	return dc, dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: c.onMessage}), nil
}

// waitForChannels blocks until a channel is wanted; false when the
// Multiplexer closed.
func (c *conn) waitForChannels(ctx context.Context) bool {
	for {
		c.mu.Lock()
		n := len(c.entries)
		c.mu.Unlock()
		if n > 0 {
			return true
		}
		select {
		case <-c.kicks:
		case <-ctx.Done():
			return false
		}
	}
}

// serve processes subscription changes on one connection until it is lost,
// retired, or the Multiplexer closes. It returns the connection it ended with
// (a retirement replaces it) for the caller to close.
func (c *conn) serve(ctx context.Context, dc rueidis.DedicatedClient, lost <-chan error, reconnect bool) (rueidis.DedicatedClient, error) {
	var retryIn time.Duration // backoff after a transient failure; 0 when none
	for {
		retry, err := c.flush(ctx, dc)
		if err != nil {
			return dc, err
		}
		if reconnect {
			reconnect = false
			c.mu.Lock()
			c.reconnects++
			c.mu.Unlock()
		}
		if !retry && c.shouldRetire() {
			ndc, nlost, err := c.retire(ctx, dc)
			switch {
			case errors.Is(err, errRetired):
				return dc, err
			case err == nil:
				dc.Close()
				dc, lost = ndc, nlost
				continue
			case ctx.Err() != nil:
				return dc, err
			case transient(err):
				retry = true
			}
			// A permanent refusal (an ACL revoked meanwhile) waits for the
			// next change: the idle channels cost only memory.
		}
		timer := c.mux.retryTimer(retry, &retryIn)
		kicks := c.kicks
		if retry {
			// Subscribing more while Redis refuses would only meet the same
			// error: newcomers wait for the retry.
			kicks = nil
		}
		if err := c.await(ctx, kicks, timer, lost); err != nil {
			return dc, err
		}
	}
}

// masterCheckEvery is how often a connection of a Sentinel client checks
// that the client still names the master it was dialled to.
const masterCheckEvery = 200 * time.Millisecond

// await waits for a kick, the retry timer, the connection's loss or the
// end of ctx. With a Sentinel client it also ends when the client has moved
// to another master: rueidis moves its pool on +switch-master, but leaves a
// dedicated connection where it is, and after a planned failover the old
// master goes on accepting subscriptions for as long as the Sentinels take to
// demote it (seconds), where no release publishes any more.
func (c *conn) await(ctx context.Context, kicks <-chan struct{}, timer <-chan time.Time, lost <-chan error) error {
	var check <-chan time.Time
	if c.mux.client.Mode() == rueidis.ClientModeSentinel {
		t := time.NewTicker(masterCheckEvery)
		defer t.Stop()
		check = t.C
	}
	for {
		select {
		case <-kicks:
			return nil
		case <-timer:
			return nil
		case <-lost:
			return errors.New("pubsub: connection lost")
		case <-ctx.Done():
			return ctx.Err()
		case <-check:
			if now := c.nodes(); now != c.dialledNodes {
				return fmt.Errorf("pubsub: the client moved from %s to %s", c.dialledNodes, now)
			}
		}
	}
}

// nodes names the nodes the client sends to (for a Sentinel client, the
// master it follows, and a replica with SendToReplicas).
func (c *conn) nodes() string {
	addrs := make([]string, 0, 2)
	for addr := range c.mux.client.Nodes() {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	return strings.Join(addrs, ",")
}

// flush sends the pending SUBSCRIBEs. A connection error is returned; retry
// reports that a transient Redis error (BUSY, LOADING, ...) left channels
// pending, to be tried again after a backoff.
func (c *conn) flush(ctx context.Context, dc rueidis.DedicatedClient) (retry bool, err error) {
	c.mu.Lock()
	var subs []*entry
	for _, e := range c.toSub {
		if c.entries[e.channel] != e || e.confirmed {
			continue // refused, or already subscribed
		}
		if e.n == 0 {
			c.deleteEntry(e) // nobody waits any more: not worth a subscription
			continue
		}
		subs = append(subs, e)
	}
	c.toSub = nil
	c.mu.Unlock()

	for start := 0; start < len(subs); start += subscribeBatch {
		batch := subs[start:min(start+subscribeBatch, len(subs))]
		if rest, err := c.subscribe(ctx, dc, batch); err != nil {
			c.requeue(append(rest, subs[start+len(batch):]...), err)
			if _, isRedis := rueidis.IsRedisErr(err); isRedis {
				return true, nil
			}
			return false, err
		}
	}
	return false, nil
}

// subscribe sends SUBSCRIBE for batch and settles its entries: confirmed, or
// refused for good. It returns the entries left pending with the error that
// stopped them: a connection error or a transient Redis error.
func (c *conn) subscribe(ctx context.Context, dc rueidis.DedicatedClient, batch []*entry) ([]*entry, error) {
	return c.subscribeOn(ctx, dc, nil, batch)
}

// subscribeOn is subscribe for classic (l nil: SUBSCRIBE) or sharded pub/sub
// (SSUBSCRIBE on shard connection l; batch shares one slot).
func (c *conn) subscribeOn(ctx context.Context, dc rueidis.DedicatedClient, l *link, batch []*entry) ([]*entry, error) {
	names := make([]string, len(batch))
	for i, e := range batch {
		names[i] = e.channel
	}
	cmd := dc.B().Subscribe().Channel(names...).Build()
	if l != nil {
		cmd = dc.B().Ssubscribe().Channel(names...).Build()
		c.mu.Lock()
		for _, n := range names {
			delete(l.dropped, n) // pushes from now on are about this subscription
		}
		c.mu.Unlock()
	}
	callCtx, cancel := callContext(ctx, l)
	defer cancel()
	err := dc.Do(callCtx, cmd).Error()
	if err == nil && l != nil {
		// Confirmed only on the slot's master: see verifyMaster.
		if verr := verifyMaster(callCtx, dc, names[0]); verr != nil {
			return batch, verr
		}
	}
	if err != nil && !permanent(err) {
		return batch, err
	}
	if err == nil || len(batch) == 1 {
		c.settle(batch, err, l)
		return nil, nil
	}
	// Redis refuses the whole command when one channel is denied (NOPERM):
	// find it by halves, so that the others are not refused with it.
	half := len(batch) / 2
	if rest, err := c.subscribeOn(ctx, dc, l, batch[:half]); err != nil {
		return append(rest, batch[half:]...), err
	}
	return c.subscribeOn(ctx, dc, l, batch[half:])
}

// callContext bounds the SSUBSCRIBE on shard connection l and the master
// check after it by shardCallTimeout, so that a hung node holds up its own
// job only; a classic SUBSCRIBE (l nil) keeps ctx.
func callContext(ctx context.Context, l *link) (context.Context, context.CancelFunc) {
	if l == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, shardCallTimeout)
}

// settle records Redis's answer to the subscription of es: confirmed when
// refusal is nil, else refused for good. l is the shard connection of a
// sharded subscription, nil for a classic one.
func (c *conn) settle(es []*entry, refusal error, l *link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range es {
		if c.entries[e.channel] != e {
			continue
		}
		if refusal != nil {
			c.refuse(e, refusal)
			continue
		}
		if l != nil && (l.dropped[e.channel] || l.closed) {
			// Redis dropped it (its slot moved) before we saw the
			// confirmation, or runSharded dropped l meanwhile: subscribe
			// it again where the slot now is.
			delete(l.dropped, e.channel)
			e.wake = true
			c.toSub = append(c.toSub, e)
			c.kick()
			continue
		}
		e.link = l
		e.confirmed = true
		e.lastErr = nil
		close(e.ready)
		if e.idle {
			c.idle++ // all its Waiters left while it was being subscribed
		}
		if e.wake {
			// Messages published while the channel was not subscribed are
			// lost: every waiter re-checks now rather than sitting out its lease.
			e.wake = false
			for w := e.head; w != nil; w = w.next {
				w.wakeNow()
			}
		}
	}
}

// refuse detaches e after Redis refused its subscription for good, and tells
// its Waiters (Waiter.Err). Called with c.mu held.
func (c *conn) refuse(e *entry, err error) {
	e.err = fmt.Errorf("%w: channel %q: %w", ErrSubscriptionRefused, e.channel, err)
	c.deleteEntry(e)
	close(e.ready)
	for w := e.head; w != nil; w = w.next {
		w.signal()
	}
}

// requeue puts es back for the next flush, remembering why they wait.
func (c *conn) requeue(es []*entry, err error) {
	c.mu.Lock()
	for _, e := range es {
		e.lastErr = err
	}
	c.toSub = append(c.toSub, es...)
	c.mu.Unlock()
}

// shouldRetire reports whether idle channels are as many as live ones: then
// replacing the connection costs at most one SUBSCRIBE per retired channel.
func (c *conn) shouldRetire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idle > 0 && c.idle >= len(c.entries)-c.idle
}

// retire replaces old by a new connection subscribed to the live channels
// only, which drops the idle ones without an UNSUBSCRIBE. The new connection
// is subscribed before old is let go, so no message is lost: one published
// meanwhile may arrive twice, a spurious wake that Waiters tolerate. It
// returns errRetired when no channel is live: old should just be closed.
func (c *conn) retire(ctx context.Context, old rueidis.DedicatedClient) (rueidis.DedicatedClient, <-chan error, error) {
	c.mu.Lock()
	var moving []*entry
	for _, e := range c.entries {
		if e.confirmed && !e.idle {
			e.moving = true
			moving = append(moving, e)
		}
	}
	c.mu.Unlock()
	if len(moving) == 0 {
		return nil, nil, errRetired
	}
	abort := func(dc rueidis.DedicatedClient, err error) (rueidis.DedicatedClient, <-chan error, error) {
		if dc != nil {
			dc.Close()
		}
		c.mu.Lock()
		for _, e := range moving {
			e.moving = false
		}
		c.mu.Unlock()
		return nil, nil, err
	}
	dc, lost, err := c.dial(ctx)
	if err != nil {
		return abort(nil, err)
	}
	for start := 0; start < len(moving); start += subscribeBatch {
		batch := moving[start:min(start+subscribeBatch, len(moving))]
		names := make([]string, len(batch))
		for i, e := range batch {
			names[i] = e.channel
		}
		if err := dc.Do(ctx, dc.B().Subscribe().Channel(names...).Build()).Error(); err != nil {
			return abort(dc, err)
		}
	}
	// Every message old received before this reply was published before it,
	// so it has been dispatched; later ones also reach dc.
	fenceErr := old.Do(ctx, old.B().Ping().Build()).NonRedisError()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idle = 0
	for _, e := range c.entries {
		switch {
		case e.moving:
			e.moving = false
			if e.idle {
				c.idle++ // went idle meanwhile
			}
			if fenceErr != nil {
				// old may have dropped messages: re-check.
				for w := e.head; w != nil; w = w.next {
					w.wakeNow()
				}
			}
		case !e.confirmed:
			// Pending: subscribed by the next flush, on dc.
		case e.n == 0:
			e.idle, e.confirmed = false, false
			c.deleteEntry(e)
		default:
			// Rejoined while being retired: subscribed on old only.
			e.confirmed = false
			e.ready = make(chan struct{})
			e.wake = true
			c.toSub = append(c.toSub, e)
		}
	}
	return dc, lost, nil
}

// dropSubscriptions forgets the closed connection's subscriptions: channels
// with waiters are queued for resubscription (new joiners wait for it), idle
// ones are dropped.
func (c *conn) dropSubscriptions() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.toSub, c.idle = c.toSub[:0], 0
	for ch, e := range c.entries {
		e.moving = false
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
			e.wake = true
		}
		c.toSub = append(c.toSub, e)
	}
}

// transient reports whether err may go away by itself: a connection error, or
// a Redis error such as BUSY (a script runs), LOADING, or NOAUTH/WRONGPASS
// while credentials are rotated.
func transient(err error) bool {
	return err != nil && !permanent(err)
}

// permanent reports whether err is a Redis refusal that retrying will not
// change, such as NOPERM for a channel.
func permanent(err error) bool {
	rerr, isRedis := rueidis.IsRedisErr(err)
	if !isRedis {
		return false
	}
	code, _, _ := strings.Cut(rerr.Error(), " ")
	switch code {
	// MOVED and ASK only answer SSUBSCRIBE: the channel's slot is elsewhere.
	case "BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOAUTH", "WRONGPASS", "MOVED", "ASK":
		return false
	}
	return true
}

// retryTimer fires when a connection that met an error (retry) should try
// again, with a delay doubling from MinReconnectBackoff up to the maximum
// backoff; *retryIn carries the last delay and is reset after a success, when
// the timer is nil (it never fires).
func (m *Multiplexer) retryTimer(retry bool, retryIn *time.Duration) <-chan time.Time {
	if !retry {
		*retryIn = 0
		return nil
	}
	*retryIn = min(max(2**retryIn, MinReconnectBackoff), m.cfg.MaxBackoff)
	return time.After(*retryIn)
}
