package mux

import (
	"context"
	"errors"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/slot"
)

// A shard connection whose idle channels are as many as its live ones is
// replaced make-before-break, as retire replaces a classic one: a new
// connection to the same node subscribes the live channels first (each
// slot's checked to be on its master, see verifyMaster), and both
// connections' messages on them are delivered meanwhile (one may arrive
// twice: a spurious wake, which Waiters tolerate). A PING on the old
// connection then fences what it received, the channels move to the new
// one, and the old one closes with its idle channels. Every message
// published on a live channel reaches a subscriber throughout, so that a
// lock's grant published then is not counted undelivered and taken back.
// A slot that moved away from the node (SSUBSCRIBE answers MOVED or ASK,
// or the master check after it MOVED while the node is still a master) is
// left out: its channels go with the old connection and are subscribed
// where the slot now lives. A node that is no longer a master (a failover:
// a replica accepts SSUBSCRIBE) ends the retirement, and both connections
// go, as a job's connection to a replica does. When the replacement fails otherwise (BUSY, a timeout...), the old
// connection is kept if it still answers, and the node's next retirement
// waits for a backoff; if it does not, it is dropped as a lost one is (its
// live channels subscribed again, their Waiters woken).
//
// The retirement runs as a job of its node (shardJob.retiring): no other job
// runs for the node meanwhile, so nothing else is confirmed on either
// connection.

// startRetire replaces old, the link of node n, on a goroutine of its own.
func (s *sharder) startRetire(n *shardNode, old *link) {
	n.busy = true
	j := &shardJob{addr: old.addr, clients: s.c.mux.client.Nodes(), retiring: old}
	s.c.mux.wg.Add(1)
	go s.c.runRetire(s.ctx, j, s.lost, s.done)
}

// runRetire runs j, a retirement, and hands it back on done.
func (c *conn) runRetire(ctx context.Context, j *shardJob, lost chan<- linkLost, done chan<- *shardJob) {
	defer c.mux.wg.Done()
	j.err = c.replaceLink(ctx, j, lost)
	select {
	case done <- j:
	case <-ctx.Done():
		if j.link != nil {
			j.link.dc.Close() // runSharded is gone, or going without it
		}
	}
}

// replaceLink dials j's new link, subscribes the live channels of
// j.retiring there and moves them to it.
func (c *conn) replaceLink(ctx context.Context, j *shardJob, lost chan<- linkLost) error {
	node := j.clients[j.addr]
	if node == nil {
		return errors.New("pubsub: the node left the topology")
	}
	l, err := c.openLink(ctx, j.addr, node, lost)
	if err != nil {
		return err
	}
	j.link = l
	leftOut := map[uint16]bool{} // slots that moved away from the node
	for pass := 1; ; pass++ {
		if err := c.moveLive(ctx, j.retiring, l, leftOut); err != nil {
			c.stopMoving(l)
			var notMaster *notMasterError
			if !errors.As(err, &notMaster) {
				j.keepOld = fence(ctx, j.retiring) == nil
			}
			return err
		}
		fenceErr := fence(ctx, j.retiring)
		closeOld, again, err := c.moveTo(j.retiring, l, fenceErr != nil, leftOut, pass < maxRetirePasses)
		switch {
		case again:
			continue
		case err != nil:
			j.keepOld = fenceErr == nil
			return err
		}
		j.closeOld = closeOld
		return nil
	}
}

// maxRetirePasses bounds the passes of a retirement over the channels that
// became live (a Waiter came back to an idle one) while it ran.
const maxRetirePasses = 3

// errReplacementLost is a retirement's error when its new connection was
// lost before the channels moved to it.
var errReplacementLost = errors.New("pubsub: the replacement connection was lost")

// moveLive subscribes on l the live channels confirmed on old that are not
// moving yet, slot by slot (see moveSlot), but those of slots left out; a
// slot that turns out to have moved away from the node is left out from
// then on.
func (c *conn) moveLive(ctx context.Context, old, l *link, leftOut map[uint16]bool) error {
	for slot, es := range c.startMoving(old, l, leftOut) {
		subscribed, err := c.moveSlot(ctx, l, slot, es)
		if err != nil {
			return err
		}
		if !subscribed {
			leftOut[slot] = true
		}
	}
	return nil
}

// startMoving makes l the replacement of old and returns, by slot, the live
// channels confirmed on old that are not moving yet, but those of slots
// left out.
func (c *conn) startMoving(old, l *link, leftOut map[uint16]bool) map[uint16][]*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	l.replaces = old
	bySlot := map[uint16][]*entry{}
	for _, e := range c.entries {
		if c.toMove(e, old, leftOut) {
			bySlot[slot.Of(e.channel)] = append(bySlot[slot.Of(e.channel)], e)
		}
	}
	return bySlot
}

// toMove tells a live channel confirmed on old, not moving yet, of a slot
// not left out. Called with c.mu held.
func (c *conn) toMove(e *entry, old *link, leftOut map[uint16]bool) bool {
	return e.link == old && e.confirmed && !e.idle && !e.moving && !leftOut[slot.Of(e.channel)]
}

// subscribeMoving subscribes es, channels of one slot, on l, batch by batch,
// and marks each batch moving once l's node is shown to be the slot's master
// (verifyMaster): from then on l's messages on them are delivered too (before,
// old, still subscribed, hears whatever l does). Nothing is settled: the
// entries stay confirmed on old until moveTo.
func (c *conn) subscribeMoving(ctx context.Context, l *link, es []*entry) error {
	for start := 0; start < len(es); start += subscribeBatch {
		batch := es[start:min(start+subscribeBatch, len(es))]
		names := make([]string, len(batch))
		for i, e := range batch {
			names[i] = e.channel
		}
		callCtx, cancel := context.WithTimeout(ctx, shardCallTimeout)
		err := l.dc.Do(callCtx, l.dc.B().Ssubscribe().Channel(names...).Build()).Error()
		if err == nil {
			err = verifyMaster(callCtx, l.dc, names[0])
		}
		cancel()
		if err != nil {
			return err
		}
		c.mu.Lock()
		for _, e := range batch {
			if e.confirmed && e.link == l.replaces {
				e.moving = true
			}
		}
		c.mu.Unlock()
	}
	return nil
}

// moveSlot subscribes es, the live channels of one slot, on l (see
// subscribeMoving), and reports whether it did. A slot that moved away from
// the node is not (its new owner recorded when known). A node that is no
// longer a master fails it with a notMasterError.
func (c *conn) moveSlot(ctx context.Context, l *link, slot uint16, es []*entry) (bool, error) {
	err := c.subscribeMoving(ctx, l, es)
	owner, moved := movedAway(err)
	var notMaster *notMasterError
	if errors.As(err, &notMaster) {
		// The slot moved after its SSUBSCRIBE (whose subscription its
		// migration drops), or the node is a replica now.
		if roleErr := stillMaster(ctx, l); roleErr != nil {
			return false, roleErr
		}
		owner, moved = notMaster.master, true
	}
	if !moved {
		return err == nil, err
	}
	if owner != "" {
		c.setOwner(slot, owner)
	}
	return false, nil
}

// movedAway tells an error of subscribeMoving's SSUBSCRIBE that says the
// slot is not the node's any more, so that nothing was subscribed: MOVED
// (to owner). (An ASK, a slot being migrated, which the node still serves,
// is a failure like any other: the old connection is kept.)
func movedAway(err error) (owner string, moved bool) {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		return rerr.IsMoved()
	}
	return "", false
}

// stillMaster asks l's node whether it is a master (see roleIsMaster).
func stillMaster(ctx context.Context, l *link) error {
	ctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
	defer cancel()
	return roleIsMaster(ctx, l.dc)
}

// fence PINGs l: once it answers, every message l received before has been
// delivered (see retire).
func fence(ctx context.Context, l *link) error {
	ctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
	defer cancel()
	return l.dc.Do(ctx, l.dc.B().Ping().Build()).NonRedisError()
}

// stopMoving gives up the replacement l: its channels stay where they are.
func (c *conn) stopMoving(l *link) {
	c.mu.Lock()
	for _, e := range c.entries {
		if e.link == l.replaces {
			e.moving = false
		}
	}
	l.replaces = nil
	wasClosed := l.closed
	l.closed = true
	c.mu.Unlock()
	if !wasClosed {
		c.closeLink(l)
	}
}

// moveTo moves the channels moving from old to l and lets old go with the
// rest: an idle channel is dropped, one of a slot left out (or that Redis
// dropped from l) is subscribed again, its Waiters woken. fenceFailed: old
// may have lost messages before the move, so the moved channels' Waiters are
// woken too. It reports whether old is the caller's to close (it was not
// dropped meanwhile); again, with nothing changed, when mayRepeat and a
// channel became live meanwhile (to be subscribed on l first); and
// errReplacementLost, with nothing moved, when l was lost meanwhile.
func (c *conn) moveTo(old, l *link, fenceFailed bool, leftOut map[uint16]bool, mayRepeat bool) (closeOld, again bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.closed {
		for _, e := range c.entries {
			if e.link == old {
				e.moving = false
			}
		}
		l.replaces = nil
		return false, false, errReplacementLost
	}
	if mayRepeat {
		for _, e := range c.entries {
			if c.toMove(e, old, leftOut) {
				return false, true, nil
			}
		}
	}
	l.replaces = nil
	closeOld = !old.closed
	old.closed = true
	for _, e := range c.entries {
		if e.link != old {
			continue
		}
		if !e.moving || l.dropped[e.channel] {
			c.unconfirm(e)
			continue
		}
		e.moving = false
		e.link = l
		if fenceFailed {
			for w := e.head; w != nil; w = w.next {
				w.wakeNow()
			}
		}
	}
	c.kick()
	return closeOld, false, nil
}

// retireDone takes in a finished retirement: the new link becomes the
// node's and the old one closes, or, when the replacement failed, the old
// one stays (it answered; the node backs off) or is dropped: as a lost one,
// or, when the node turned out to be a replica, as a job drops its link
// there.
func (s *sharder) retireDone(j *shardJob) {
	n := s.node(j.addr)
	n.busy = false
	var notMaster *notMasterError
	switch {
	case j.err != nil && j.keepOld:
		s.backOff(n)
		return
	case j.err != nil:
		s.dropLink(j.retiring, !errors.As(j.err, &notMaster))
		return
	}
	if j.closeOld {
		s.c.closeLink(j.retiring)
	}
	n.retryIn = 0
	s.c.mu.Lock()
	kept := !j.link.closed
	s.c.mu.Unlock()
	switch {
	case kept:
		n.link = j.link
	case n.link == j.retiring:
		n.link = nil
	}
}
