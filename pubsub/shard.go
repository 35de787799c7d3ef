package pubsub

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/slot"
)

// maxRedirects bounds the MOVED hops one slot's subscription follows in one
// flush; past it the slot waits for the retry backoff (topology in flux).
const maxRedirects = 4

// link is one shard connection of a sharded conn: a dedicated connection to
// one master, carrying the SSUBSCRIBEs of the channels whose slots it owns.
// Its fields other than dc are guarded by conn.mu.
type link struct {
	addr string
	dc   rueidis.DedicatedClient
	// dropped names channels Redis unsubscribed (sunsubscribe push: their
	// slot moved) before their subscription was settled; see settle.
	dropped map[string]bool
}

// linkLost reports that a shard connection closed or broke.
type linkLost struct {
	l   *link
	err error
}

// runSharded is run for sharded pub/sub: one connection per master that has
// channels with Waiters, opened on demand. Each slot's channels are
// subscribed with SSUBSCRIBE on the master that owns the slot (learned from
// MOVED replies); when a slot moves (Redis pushes sunsubscribe) or a shard
// connection is lost, its channels' Waiters are woken at once and the
// channels subscribed again where their slots now live, after which their
// Waiters are woken again: messages published in between are lost.
func (c *conn) runSharded() {
	ctx := c.mux.ctx
	links := map[string]*link{}
	lost := make(chan linkLost)
	defer func() {
		for _, l := range links {
			l.dc.Close()
		}
	}()
	var retryIn time.Duration
	for {
		retry := c.flushSharded(ctx, links, lost)
		c.retireLinks(links)
		timer := c.mux.retryTimer(retry, &retryIn)
		kicks := c.kicks
		if retry {
			kicks = nil // newcomers wait for the retry
		}
		select {
		case <-kicks:
		case <-timer:
		case ev := <-lost:
			if links[ev.l.addr] == ev.l {
				c.dropLink(links, ev.l, true)
			}
		case <-ctx.Done():
			return
		}
	}
}

// openLink dials a shard connection to addr and watches it.
func (c *conn) openLink(ctx context.Context, addr string, node rueidis.Client, lost chan<- linkLost) *link {
	l := &link{addr: addr, dropped: map[string]bool{}}
	dc, _ := node.Dedicate()
	l.dc = dc
	ch := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      c.onMessage,
		OnSubscription: func(s rueidis.PubSubSubscription) { c.onShardSubscription(l, s) },
	})
	c.mux.wg.Add(1)
	go func() {
		defer c.mux.wg.Done()
		err := <-ch // an error, or closed: either way the connection is gone
		select {
		case lost <- linkLost{l, err}:
		case <-ctx.Done():
		}
	}()
	return l
}

// onShardSubscription runs on rueidis's reading goroutine: a sunsubscribe
// push means Redis dropped the channel (its slot moved away from this
// master, by migration or failover).
func (c *conn) onShardSubscription(l *link, s rueidis.PubSubSubscription) {
	if s.Kind != "sunsubscribe" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[s.Channel]
	if e == nil || e.link != l || !e.confirmed {
		// Not settled yet (or on another connection): settle checks this.
		l.dropped[s.Channel] = true
		return
	}
	delete(c.slotOwner, slot.Of(s.Channel))
	c.unconfirm(e)
	c.kick()
}

// unconfirm takes a confirmed sharded entry off its connection: dropped when
// nobody waits, else queued for resubscription, its Waiters woken now and
// again once it is subscribed. Called with c.mu held.
func (c *conn) unconfirm(e *entry) {
	if e.n == 0 {
		c.deleteEntry(e)
		return
	}
	e.link = nil
	e.confirmed = false
	e.ready = make(chan struct{})
	e.wake = true
	c.toSub = append(c.toSub, e)
	for w := e.head; w != nil; w = w.next {
		w.signal()
	}
}

// dropLink closes l and resubscribes its channels elsewhere; broken tells a
// loss (counted as a reconnect) from a retirement.
func (c *conn) dropLink(links map[string]*link, l *link, broken bool) {
	delete(links, l.addr)
	l.dc.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if broken {
		c.reconnects++
		// The master may be gone: ask for its slots' owners afresh.
		for slot, addr := range c.slotOwner {
			if addr == l.addr {
				delete(c.slotOwner, slot)
			}
		}
	}
	for _, e := range c.entries {
		if e.link == l {
			c.unconfirm(e)
		}
	}
	c.kick()
}

// retireLinks closes shard connections whose idle channels are as many as
// their live ones (as retire does for classic pub/sub): the live ones are
// subscribed again on a fresh connection, their Waiters woken once they are.
func (c *conn) retireLinks(links map[string]*link) {
	c.mu.Lock()
	if c.idle == 0 {
		c.mu.Unlock()
		return
	}
	idle, live := map[*link]int{}, map[*link]int{}
	for _, e := range c.entries {
		if e.link == nil {
			continue
		}
		if e.idle {
			idle[e.link]++
		} else {
			live[e.link]++
		}
	}
	c.mu.Unlock()
	for l, n := range idle {
		if n >= live[l] && links[l.addr] == l {
			c.dropLink(links, l, false)
		}
	}
}

// flushSharded subscribes pending channels, each slot on its master. It
// reports whether some are left for a retry after a backoff.
func (c *conn) flushSharded(ctx context.Context, links map[string]*link, lost chan<- linkLost) (retry bool) {
	c.mu.Lock()
	bySlot := map[uint16][]*entry{}
	for _, e := range c.toSub {
		if c.entries[e.channel] != e || e.confirmed {
			continue
		}
		if e.n == 0 {
			c.deleteEntry(e)
			continue
		}
		bySlot[slot.Of(e.channel)] = append(bySlot[slot.Of(e.channel)], e)
	}
	c.toSub = nil
	owners := make(map[uint16]string, len(bySlot))
	for slot := range bySlot {
		owners[slot] = c.slotOwner[slot]
	}
	c.mu.Unlock()
	if len(bySlot) == 0 {
		return false
	}
	nodes := c.mux.client.Nodes()
	for slot, es := range bySlot {
		if ctx.Err() != nil {
			c.requeue(es, ctx.Err())
			continue
		}
		if !c.subscribeSlot(ctx, links, lost, nodes, slot, owners[slot], es) {
			retry = true
		}
	}
	return retry
}

// subscribeSlot subscribes es (channels of slot) on the slot's master,
// following MOVED replies. It reports false when es were requeued for a retry.
func (c *conn) subscribeSlot(ctx context.Context, links map[string]*link, lost chan<- linkLost,
	nodes map[string]rueidis.Client, slot uint16, addr string, es []*entry) bool {
	for range maxRedirects {
		node := nodes[addr]
		if node == nil {
			addr = guessNode(links, nodes)
			if node = nodes[addr]; node == nil {
				c.requeue(es, errors.New("pubsub: no cluster node known"))
				return false
			}
		}
		l := links[addr]
		if l == nil {
			l = c.openLink(ctx, addr, node, lost)
			links[addr] = l
		}
		var rest []*entry
		var err error
		for start := 0; start < len(es); start += subscribeBatch {
			batch := es[start:min(start+subscribeBatch, len(es))]
			if rest, err = c.subscribeOn(ctx, l.dc, l, batch); err != nil {
				rest = append(rest, es[start+len(batch):]...)
				break
			}
		}
		if err == nil {
			c.mu.Lock()
			if c.slotOwner == nil {
				c.slotOwner = map[uint16]string{}
			}
			c.slotOwner[slot] = addr
			c.mu.Unlock()
			return true
		}
		es = rest
		rerr, isRedis := rueidis.IsRedisErr(err)
		if !isRedis {
			// The connection failed: its loss is reported on lost; retry.
			c.requeue(es, err)
			return false
		}
		moved, ok := rerr.IsMoved()
		if !ok {
			c.requeue(es, err) // TRYAGAIN, CLUSTERDOWN, ASK, BUSY...
			return false
		}
		addr = moved
		if nodes[addr] == nil {
			// rueidis does not know that node yet: a keyed command through
			// the cluster client makes it follow the redirect and refresh
			// its topology, so the node is there on the retry.
			_ = c.mux.client.Do(ctx, c.mux.client.B().Exists().Key(es[0].channel).Build()).Error()
			c.mu.Lock()
			if c.slotOwner == nil {
				c.slotOwner = map[uint16]string{}
			}
			c.slotOwner[slot] = addr
			c.mu.Unlock()
			c.requeue(es, err)
			return false
		}
	}
	c.requeue(es, errors.New("pubsub: too many MOVED redirections"))
	return false
}

// guessNode picks a node for a slot whose master is not known: one already
// connected, else the first by address. A wrong guess answers MOVED.
func guessNode(links map[string]*link, nodes map[string]rueidis.Client) string {
	for addr := range links {
		if nodes[addr] != nil {
			return addr
		}
	}
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	if len(addrs) == 0 {
		return ""
	}
	return addrs[0]
}
