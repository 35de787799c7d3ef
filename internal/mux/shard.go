package mux

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/slot"
)

// maxRedirects bounds the MOVED hops one slot's subscription follows in a
// row; past it the slot's last node backs off (topology in flux).
const maxRedirects = 4

// shardCallTimeout bounds each SSUBSCRIBE (with the master check sent after
// it) and topology refresh of a shard job. A healthy master answers within
// milliseconds even on a loaded host, so 3s is far past any healthy reply,
// while a hung node (SIGSTOP, a full disk, a long script) makes only its own
// slots' subscriptions wait that long before a retry; the cluster takes
// longer than that to fail a node over anyway (cluster-node-timeout, 15s by
// default). Dialling is bounded by rueidis (Dialer.Timeout, 5s by default).
const shardCallTimeout = 3 * time.Second

// link is one shard connection of a sharded conn: a dedicated connection to
// one master, carrying the SSUBSCRIBEs of the channels whose slots it owns.
// Its fields other than addr and dc are guarded by conn.mu.
type link struct {
	addr string
	dc   rueidis.DedicatedClient
	// dropped names channels Redis unsubscribed (sunsubscribe push: their
	// slot moved) before their subscription was settled; see settle.
	dropped map[string]bool
	closed  bool // dropped, or retired: nothing is confirmed on it any more
	// replaces is the link this one is replacing (see shard_retire.go):
	// messages here on channels moving from it are delivered too.
	replaces *link
}

// linkLost reports that a shard connection closed or broke.
type linkLost struct {
	l   *link
	err error
}

// shardNode is runSharded's state for one node address.
type shardNode struct {
	link     *link         // its shard connection, nil until a job dials one
	busy     bool          // a job runs for it: no other is started
	retryIn  time.Duration // the last backoff, 0 after a job without failure
	retryAt  time.Time     // no job starts before then
	failedAt time.Time     // when its link last failed, zero after a success
}

// sharder is runSharded's state, touched by its goroutine only.
type sharder struct {
	c         *conn
	ctx       context.Context
	nodes     map[string]*shardNode
	redirects map[uint16]int // MOVED hops followed in a row, per slot
	lost      chan linkLost
	done      chan *shardJob
}

// runSharded is run for sharded pub/sub: one connection per master that has
// channels with Waiters, opened on demand. Each slot's channels are
// subscribed with SSUBSCRIBE on the master that owns the slot (learned from
// MOVED replies); when a slot moves (Redis pushes sunsubscribe) or a shard
// connection is lost, its channels' Waiters are woken at once and the
// channels subscribed again where their slots now live, after which their
// Waiters are woken again: messages published in between are lost.
//
// Each node's subscriptions (and its dial) run as a job on a goroutine of
// their own, one job per node at a time, every call bounded: a hung or dead
// master holds up the channels of its own slots only.
func (c *conn) runSharded() {
	s := &sharder{c: c, ctx: c.mux.ctx, nodes: map[string]*shardNode{}, redirects: map[uint16]int{},
		lost: make(chan linkLost), done: make(chan *shardJob)}
	defer s.closeLinks()
	for {
		var timer <-chan time.Time
		if next := earlier(s.flush(), s.retireLinks()); !next.IsZero() {
			timer = time.After(time.Until(next))
		}
		select {
		case <-c.kicks:
		case <-timer:
		case ev := <-s.lost:
			// A node in backoff keeps its channels until its retry: no
			// redial in a tight loop of a node that is down.
			s.dropLink(ev.l, true)
		case j := <-s.done:
			s.jobDone(j)
		case <-s.ctx.Done():
			return
		}
	}
}

func (s *sharder) node(addr string) *shardNode {
	n := s.nodes[addr]
	if n == nil {
		n = &shardNode{}
		s.nodes[addr] = n
	}
	return n
}

// closeLinks closes every shard connection, all at once: rueidis gives a
// connection's peer up to a second to answer as it closes it, and a Close
// with N masters paused must not take N of them.
func (s *sharder) closeLinks() {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		if n.link != nil {
			wg.Go(n.link.dc.Close)
		}
	}
	wg.Wait()
}

// closeLink closes l's connection off runSharded's goroutine (see
// closeLinks): a hung master's link would hold up every other node's
// subscriptions for as long as it takes.
func (c *conn) closeLink(l *link) {
	c.mux.wg.Add(1)
	go func() {
		defer c.mux.wg.Done()
		l.dc.Close()
	}()
}

// backOff delays n's next job, doubling from MinReconnectBackoff up to the
// maximum backoff.
func (s *sharder) backOff(n *shardNode) {
	n.retryIn = min(max(2*n.retryIn, MinReconnectBackoff), s.c.mux.cfg.MaxBackoff)
	n.retryAt = time.Now().Add(n.retryIn)
}

// openLink dials a shard connection to addr and watches it.
func (c *conn) openLink(ctx context.Context, addr string, node rueidis.Client, lost chan<- linkLost) (*link, error) {
	l := &link{addr: addr, dropped: map[string]bool{}}
	dc, err := dedicate(ctx, node)
	if err != nil {
		return nil, err
	}
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
	return l, nil
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
	ours := e != nil && e.confirmed && (e.link == l || e.moving && l.replaces != nil && e.link == l.replaces)
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
	e.moving = false
	e.ready = make(chan struct{})
	e.wake = true
	c.toSub = append(c.toSub, e)
	for w := e.head; w != nil; w = w.next {
		w.wakeNow()
	}
}

// dropLink closes l and resubscribes its channels elsewhere; broken tells a
// loss (counted as a reconnect) from a retirement. A link already dropped is
// left alone, so that a loss reported twice (by its watcher and by a job
// that failed on it) counts once.
func (s *sharder) dropLink(l *link, broken bool) {
	c := s.c
	c.mu.Lock()
	if l.closed {
		c.mu.Unlock()
		return
	}
	l.closed = true
	if l.replaces != nil {
		// A retirement's new connection, lost before anything moved to it
		// (see shard_retire.go): the retirement finds it closed.
		c.mu.Unlock()
		c.closeLink(l)
		return
	}
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
	c.mu.Unlock()
	c.closeLink(l)
	n := s.node(l.addr)
	if n.link == l {
		n.link = nil
	}
	if broken {
		n.failedAt = time.Now()
	}
}

// retireLinks replaces shard connections whose idle channels are as many as
// their live ones by fresh connections carrying the live ones only (see
// shard_retire.go); one with no live channel is just closed. A node backing
// off is left until its retry: retireLinks returns the first such retry
// (zero if none).
func (s *sharder) retireLinks() (next time.Time) {
	c := s.c
	c.mu.Lock()
	if c.idle == 0 {
		c.mu.Unlock()
		return next
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
		node := s.nodes[l.addr]
		switch {
		case n < live[l] || node == nil || node.link != l || node.busy:
		case live[l] == 0:
			s.dropLink(l, false)
		case time.Now().Before(node.retryAt):
			next = earlier(next, node.retryAt)
		default:
			s.startRetire(node, l)
		}
	}
	return next
}

// pendingBySlot takes the channels waiting to be subscribed, by slot, with
// each slot's master as last learned ("" when not known).
func (c *conn) pendingBySlot() (map[uint16][]*entry, map[uint16]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	return bySlot, owners
}

// flush hands the pending channels, by slot, to their masters' jobs. A node
// running a job, or backing off, keeps its channels pending meanwhile; flush
// returns when the first node backing off may take them (zero if none).
func (s *sharder) flush() (next time.Time) {
	bySlot, owners := s.c.pendingBySlot()
	if len(bySlot) == 0 {
		return next
	}
	clients := s.c.mux.client.Nodes()
	s.prune(clients)
	jobs := map[string]map[uint16][]*entry{}
	now := time.Now()
	for slot, es := range bySlot {
		addr := owners[slot]
		if clients[addr] == nil {
			addr = s.guessNode(clients)
		}
		n := s.node(addr)
		switch {
		case clients[addr] == nil: // no node known: wait as for a failed one
			if !now.Before(n.retryAt) {
				s.backOff(n)
			}
			s.c.requeue(es, errors.New("pubsub: no cluster node known"))
			next = earlier(next, n.retryAt)
			continue
		case n.busy: // flushed again once its job is done
			s.c.hold(es)
			continue
		case now.Before(n.retryAt):
			s.c.hold(es)
			next = earlier(next, n.retryAt)
			continue
		}
		if jobs[addr] == nil {
			jobs[addr] = map[uint16][]*entry{}
		}
		jobs[addr][slot] = es
	}
	for addr, slots := range jobs {
		s.start(addr, clients, slots)
	}
	return next
}

// prune forgets nodes gone from the topology that have nothing running.
func (s *sharder) prune(clients map[string]rueidis.Client) {
	for addr, n := range s.nodes {
		if addr != "" && clients[addr] == nil && !n.busy && n.link == nil {
			delete(s.nodes, addr)
		}
	}
}

// guessNode picks a node for a slot whose master is not known; a wrong
// guess answers MOVED. Best is a node connected and free, then a free one
// (by address), then one running a job (whose answer waits for that job); a
// node whose link failed lately only when every node's did (then the one
// that failed longest ago), so that a dead or hung node does not keep the
// slots of live ones from being subscribed.
func (s *sharder) guessNode(clients map[string]rueidis.Client) string {
	best, bestRank := "", 0
	for addr := range clients {
		rank := s.guessRank(addr)
		if best == "" || rank < bestRank || rank == bestRank && s.guessBefore(addr, best) {
			best, bestRank = addr, rank
		}
	}
	return best
}

func (s *sharder) guessRank(addr string) int {
	n := s.nodes[addr]
	switch {
	case n == nil:
		return 1
	case !n.failedAt.IsZero():
		return 3
	case n.busy:
		return 2
	case n.link != nil:
		return 0
	}
	return 1
}

// guessBefore orders nodes of one rank: the one that failed longest ago
// first, then by address.
func (s *sharder) guessBefore(a, b string) bool {
	var fa, fb time.Time
	if n := s.nodes[a]; n != nil {
		fa = n.failedAt
	}
	if n := s.nodes[b]; n != nil {
		fb = n.failedAt
	}
	if !fa.Equal(fb) {
		return fa.Before(fb)
	}
	return a < b
}

// earlier is the earlier of a and b, a zero time standing for none.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// hold puts es back to wait for their node, as they were.
func (c *conn) hold(es []*entry) {
	c.mu.Lock()
	c.toSub = append(c.toSub, es...)
	c.mu.Unlock()
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
