package pubsub

import (
	"context"
	"errors"
	"sort"
	"strings"
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
	var timer <-chan time.Time
	flush := true
	for {
		if flush {
			retry := c.flushSharded(ctx, links, lost)
			c.retireLinks(links)
			timer = c.mux.retryTimer(retry, &retryIn)
		}
		kicks := c.kicks
		if timer != nil {
			kicks = nil // newcomers wait for the retry
		}
		flush = true
		select {
		case <-kicks:
		case <-timer:
		case ev := <-lost:
			if links[ev.l.addr] == ev.l {
				c.dropLink(links, ev.l, true)
			}
			// A link lost while a retry is pending (most often the one
			// just dialled to a node that is down) waits for that retry:
			// flushing at once would redial the node in a tight loop.
			flush = timer == nil
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
		OnMessage:      func(m rueidis.PubSubMessage) { c.onShardMessage(l, m) },
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

// onShardMessage runs on rueidis's reading goroutine: it delivers a message
// only when its channel is confirmed on l, and so on the master of its slot
// (see verifyMaster). A replica of that master would accept the SSUBSCRIBE
// and receive what the master publishes, while SPUBLISH on the master counts
// the master's subscribers only: a hand-off heard there would be counted as
// undelivered, and undone, while its grantee takes it.
func (c *conn) onShardMessage(l *link, m rueidis.PubSubMessage) {
	c.mux.messages.Add(1)
	c.mu.Lock()
	e := c.entries[m.Channel]
	ours := e != nil && e.link == l && e.confirmed
	c.mu.Unlock()
	if ours {
		c.deliver(m)
	}
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
		w.wakeNow()
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
		c.noteLinkFailed(l.addr)
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
			addr = c.guessNode(links, nodes)
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
			delete(c.linkFailedAt, addr)
			c.mu.Lock()
			if c.slotOwner == nil {
				c.slotOwner = map[uint16]string{}
			}
			c.slotOwner[slot] = addr
			c.mu.Unlock()
			return true
		}
		es = rest
		var moved string
		var notMaster *notMasterError
		switch rerr, isRedis := rueidis.IsRedisErr(err); {
		case errors.As(err, &notMaster):
			// The node replicates the slot's master (or no longer serves
			// the slot): nothing may be confirmed on it. Drop the link (a
			// replica serves no subscription of ours) and go to the master.
			c.dropLink(links, l, false)
			if moved = notMaster.master; moved == "" {
				c.requeue(es, err)
				return false
			}
		case !isRedis:
			// The connection failed: its loss is reported on lost; retry.
			c.noteLinkFailed(addr)
			c.requeue(es, err)
			return false
		default:
			var ok bool
			if moved, ok = rerr.IsMoved(); !ok {
				c.requeue(es, err) // TRYAGAIN, CLUSTERDOWN, ASK, BUSY...
				return false
			}
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
// connected, else the first by address; a node whose link failed lately
// only when every node's did (then the one that failed longest ago), so
// that a dead node does not keep the slots of live ones from being
// subscribed. A wrong guess answers MOVED.
func (c *conn) guessNode(links map[string]*link, nodes map[string]rueidis.Client) string {
	for addr := range c.linkFailedAt {
		if nodes[addr] == nil {
			delete(c.linkFailedAt, addr) // gone from the topology
		}
	}
	for addr := range links {
		if _, failed := c.linkFailedAt[addr]; nodes[addr] != nil && !failed {
			return addr
		}
	}
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	best := ""
	for _, addr := range addrs {
		at, failed := c.linkFailedAt[addr]
		if !failed {
			return addr
		}
		if best == "" || at.Before(c.linkFailedAt[best]) {
			best = addr
		}
	}
	return best
}

// noteLinkFailed records that a link to addr broke or could not subscribe
// (see guessNode).
func (c *conn) noteLinkFailed(addr string) {
	if c.linkFailedAt == nil {
		c.linkFailedAt = map[string]time.Time{}
	}
	c.linkFailedAt[addr] = time.Now()
}

// notMasterError reports a shard connection whose node turned out not to be
// the master of the slot just subscribed there (see verifyMaster); master is
// where the slot lives, when known.
type notMasterError struct{ master string }

func (e *notMasterError) Error() string {
	if e.master == "" {
		return "pubsub: the node is not the master of the slot"
	}
	return "pubsub: the node is not the master of the slot, " + e.master + " is"
}

// verifyMaster checks, after an SSUBSCRIBE on l, that l's node serves the
// channel's slot as its master: a keyed read on the same connection, which a
// replica answers with MOVED where it accepted the SSUBSCRIBE. A connection
// rueidis opened to a replica for SendToReplicas is READONLY, and there the
// replica answers the read itself: READWRITE, sent with the read, takes the
// connection out of that mode first. Sent after the SSUBSCRIBE, the read
// also catches a master demoted in between (which would not push
// sunsubscribe for a subscription made after its demotion). A user that may
// not run READWRITE, or read the channel name as a key, is asked ROLE
// instead; when that is refused too, the node is trusted (the README's ACL
// rule grants READWRITE).
func verifyMaster(ctx context.Context, dc rueidis.DedicatedClient, channel string) error {
	res := dc.DoMulti(ctx, dc.B().Readwrite().Build(), dc.B().Exists().Key(channel).Build())
	rwErr, err := res[0].Error(), res[1].Error()
	if _, isRedis := rueidis.IsRedisErr(rwErr); rwErr != nil && !isRedis {
		return rwErr
	}
	if err == nil {
		if rwErr != nil {
			return roleIsMaster(ctx, dc) // the connection may be READONLY
		}
		return nil
	}
	rerr, isRedis := rueidis.IsRedisErr(err)
	if !isRedis {
		return err
	}
	if addr, ok := rerr.IsMoved(); ok {
		return &notMasterError{master: addr}
	}
	if _, ok := rerr.IsAsk(); ok {
		return nil // the master, migrating the slot away: it serves it still
	}
	if !strings.HasPrefix(rerr.Error(), "NOPERM") {
		return err // CLUSTERDOWN, TRYAGAIN, LOADING...: unverified, retried
	}
	return roleIsMaster(ctx, dc)
}

// roleIsMaster asks l's node its role: a notMasterError unless it is a
// master, nil when ROLE is refused (trusted).
func roleIsMaster(ctx context.Context, dc rueidis.DedicatedClient) error {
	vals, err := dc.Do(ctx, dc.B().Role().Build()).ToArray()
	if err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis {
			return nil // denied ROLE too: trusted
		}
		return err
	}
	if len(vals) > 0 {
		if kind, _ := vals[0].ToString(); kind != "master" {
			return &notMasterError{}
		}
	}
	return nil
}
