package mux

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
)

// shardJob is the subscription work runSharded gives one node: the pending
// channels of the slots it is thought to serve. It runs on a goroutine of
// its own (runJob) and comes back to runSharded with the outcome per slot.
type shardJob struct {
	addr    string
	clients map[string]rueidis.Client // the topology when it was started
	link    *link                     // the node's link; nil: dialled by the job
	slots   []slotWork

	// A retirement (see shard_retire.go) replaces retiring by link.
	retiring *link
	err      error // the replacement failed: retiring is dropped, unless keepOld
	keepOld  bool  // the replacement failed, retiring still answers: it stays
	closeOld bool  // retiring is the job's to close (it was not dropped)
}

// slotWork is one slot's part of a shardJob.
type slotWork struct {
	slot    uint16
	es      []*entry
	rest    []*entry // left pending by err
	err     error
	skipped bool // not tried: the node failed on an earlier slot (err)
}

// start runs a job for the node at addr.
func (s *sharder) start(addr string, clients map[string]rueidis.Client, slots map[uint16][]*entry) {
	n := s.node(addr)
	n.busy = true
	j := &shardJob{addr: addr, clients: clients, link: n.link}
	for slot, es := range slots {
		j.slots = append(j.slots, slotWork{slot: slot, es: es})
	}
	s.c.mux.wg.Add(1)
	go s.c.runJob(s.ctx, j, s.lost, s.done)
}

// runJob subscribes j's slots on its node, dialling the node's link first if
// it has none, and hands j back on done. Once the node fails (a connection
// error, a timeout, or it is no master), the remaining slots are not tried:
// each would wait out its own timeout.
func (c *conn) runJob(ctx context.Context, j *shardJob, lost chan<- linkLost, done chan<- *shardJob) {
	defer c.mux.wg.Done()
	if j.link == nil {
		l, err := c.openLink(ctx, j.addr, j.clients[j.addr], lost)
		if err != nil {
			return // the Multiplexer closed while the link was dialled
		}
		j.link = l
	}
	var failed error
	for i := range j.slots {
		w := &j.slots[i]
		if failed != nil {
			w.rest, w.err, w.skipped = w.es, failed, true
			continue
		}
		w.rest, w.err = c.subscribeSlot(ctx, j.link, w.es)
		if _, isRedis := rueidis.IsRedisErr(w.err); w.err != nil && !isRedis {
			failed = w.err
		}
		c.learnMoved(ctx, j, w)
	}
	select {
	case done <- j:
	case <-ctx.Done():
		j.link.dc.Close() // runSharded is gone, or going without it
	}
}

// subscribeSlot subscribes es, channels of one slot, on l, batch by batch. It
// returns those left pending with the error that stopped them.
func (c *conn) subscribeSlot(ctx context.Context, l *link, es []*entry) ([]*entry, error) {
	for start := 0; start < len(es); start += subscribeBatch {
		batch := es[start:min(start+subscribeBatch, len(es))]
		if rest, err := c.subscribeOn(ctx, l.dc, l, batch); err != nil {
			return append(rest, es[start+len(batch):]...), err
		}
	}
	return nil, nil
}

// learnMoved makes rueidis learn the node a MOVED reply names, when it does
// not know it yet: a keyed command through the cluster client follows the
// redirect and refreshes its topology, so the node is there on the retry.
func (c *conn) learnMoved(ctx context.Context, j *shardJob, w *slotWork) {
	rerr, isRedis := rueidis.IsRedisErr(w.err)
	if !isRedis || len(w.rest) == 0 {
		return
	}
	if addr, moved := rerr.IsMoved(); moved && j.clients[addr] == nil {
		ctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
		defer cancel()
		_ = c.mux.client.Do(ctx, c.mux.client.B().Exists().Key(w.rest[0].channel).Build()).Error()
	}
}

// jobDone takes in a finished job: its link becomes the node's (unless it
// was dropped meanwhile), and each slot's outcome is recorded. A failure
// backs the node off.
func (s *sharder) jobDone(j *shardJob) {
	if j.retiring != nil {
		s.retireDone(j)
		return
	}
	n := s.node(j.addr)
	n.busy = false
	s.c.mu.Lock()
	if !j.link.closed {
		n.link = j.link
	}
	s.c.mu.Unlock()
	ok := true
	for i := range j.slots {
		if !s.slotDone(j, &j.slots[i]) {
			ok = false
		}
	}
	if ok {
		n.retryIn = 0
	} else {
		s.backOff(n)
	}
}

// slotDone records the outcome of one slot's subscription on j's node. It
// reports false when the node failed it (the node should back off).
func (s *sharder) slotDone(j *shardJob, w *slotWork) bool {
	if w.skipped {
		s.c.requeue(w.rest, w.err)
		return true
	}
	rerr, isRedis := rueidis.IsRedisErr(w.err)
	moved, isMoved := "", false
	if isRedis {
		moved, isMoved = rerr.IsMoved()
	}
	if !isMoved {
		delete(s.redirects, w.slot)
	}
	var notMaster *notMasterError
	switch {
	case w.err == nil:
		s.node(j.addr).failedAt = time.Time{}
		s.c.setOwner(w.slot, j.addr)
		return true
	case errors.As(w.err, &notMaster):
		// The node replicates the slot's master (or no longer serves the
		// slot): nothing may be confirmed on it. Drop the link (a replica
		// serves no subscription of ours) and go to the master.
		s.dropLink(j.link, false)
		if moved = notMaster.master; moved == "" {
			s.c.requeue(w.rest, w.err)
			return false
		}
	case !isRedis:
		// The connection failed or timed out: it may carry a subscription
		// made after we gave up on it, or none; a fresh one is certain.
		s.dropLink(j.link, true)
		s.c.requeue(w.rest, w.err)
		return false
	case !isMoved:
		s.c.requeue(w.rest, w.err) // TRYAGAIN, CLUSTERDOWN, ASK, BUSY...
		return false
	}
	return s.redirect(w, moved)
}

// redirect sends w's channels to addr, which a MOVED reply named, on the
// flush that follows the job;
// false past maxRedirects hops in a row (then after a backoff).
func (s *sharder) redirect(w *slotWork, addr string) bool {
	if s.redirects[w.slot]++; s.redirects[w.slot] > maxRedirects {
		delete(s.redirects, w.slot)
		s.c.requeue(w.rest, errors.New("pubsub: too many MOVED redirections"))
		return false
	}
	s.c.setOwner(w.slot, addr)
	s.c.requeue(w.rest, w.err)
	return true
}

// setOwner records addr as the master of slot.
func (c *conn) setOwner(slot uint16, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slotOwner == nil {
		c.slotOwner = map[uint16]string{}
	}
	c.slotOwner[slot] = addr
}
