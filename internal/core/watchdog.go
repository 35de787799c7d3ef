package core

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/slot"
)

// renewBatch caps the holds renewed by one script call, so that one call
// never blocks Redis for long.
const renewBatch = 256

// RenewRound describes one renewal round of the watchdog.
type RenewRound struct {
	N       uint64        // rounds with at least one renewal sent, this one included
	Holds   int           // holds whose renewal was sent
	Scripts int           // script calls sent (batches)
	Took    time.Duration // from the first send to the last reply
}

// LastRenewRound returns the watchdog's last round that sent renewals (the
// zero RenewRound before the first): how many holds and script calls it took
// and how long, for tests and diagnostics.
func (c *Client) LastRenewRound() RenewRound {
	if r := c.lastRound.Load(); r != nil {
		return *r
	}
	return RenewRound{}
}

// runWatchdog renews every watchdog hold of the Client each third of the
// watchdog timeout. A renewal that finds a hold gone ends it with
// ErrLeaseLost; a renewal that fails is tried again within the period (see
// renewRetries), and a hold whose renewals keep failing is left to its
// expiry timer, which fires when the last confirmed lease runs out.
//
// Rounds, their retries and claim extensions run in goroutines of their own
// (see goRenew), and each sends the renewals of every slot on its own (see
// renewHolds): a node that hangs holds up neither the loop below nor the
// renewals of other nodes' holds, which apply as their replies come.
func (c *Client) runWatchdog() {
	defer c.bg.Done()
	period := c.Cfg.WatchdogTimeout / 3
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	claims := time.NewTimer(time.Hour)
	claims.Stop()
	defer claims.Stop()
	retry := &renewRetries{timer: time.NewTimer(time.Hour)}
	retry.timer.Stop()
	defer retry.timer.Stop()
	done := make(chan renewDone)
	for {
		select {
		case <-ticker.C:
			// A slow renewal is still worth having while the lease lasts:
			// give it two periods (a third of the lease stays as margin).
			try := renewDone{until: time.Now().Add(period)}
			c.goRenew(done, try, func(report func([]*Hold)) { c.renewAll(2*period, report) })
		case <-retry.timer.C:
			holds, try := retry.take()
			c.goRenew(done, try, func(report func([]*Hold)) { c.renewAgain(holds, 2*period, report) })
		case d := <-done:
			retry.settle(d, time.Now())
		case <-c.claimWake:
			c.armClaims(claims)
		case <-claims.C:
			c.extendClaims()
			c.armClaims(claims)
		case <-c.closed:
			return
		}
	}
}

// renewDone is what a round or a retry reports back to the watchdog, once
// per node (see renewHolds): the holds whose renewal failed there, when the
// next round is due, whether it was a retry, and the wait before it.
type renewDone struct {
	failed []*Hold
	until  time.Time
	again  bool
	wait   time.Duration
}

// goRenew runs renew in a background goroutine. renew reports the holds that
// failed as each node's renewals end (a node that hangs holds up no other
// node's retries); each report is handed to done as try with them, unless the
// Client closes first.
func (c *Client) goRenew(done chan<- renewDone, try renewDone, renew func(report func(failed []*Hold))) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		renew(func(failed []*Hold) {
			d := try
			d.failed = failed
			select {
			case done <- d:
			case <-c.closed:
			}
		})
	}()
}

// renewRetryMin is how soon a renewal that failed is first tried again. A
// connection broken by a restart of Redis (which, persisting every write,
// kept the lease) fails the first command sent on it, and the next period
// may come too late for a lease of a second or so.
const renewRetryMin = 20 * time.Millisecond

// renewRetryMax caps the wait between retries of a failed renewal: a master
// that failed over comes back (as its promoted replica, which rueidis finds
// after the next error) at a moment nobody knows, and a retry soon after
// keeps the hold if its last confirmed lease has not run out.
const renewRetryMax = 250 * time.Millisecond

// renewRetries are the holds whose renewal failed since the watchdog's last
// round: each try that fails waits twice as long as the one before (at most
// renewRetryMax), until the next round, which renews them anyway.
type renewRetries struct {
	timer   *time.Timer
	pending []*Hold       // failed, waiting for the next try
	wait    time.Duration // the wait before the next try
	until   time.Time     // when the next round is due
	next    time.Time     // when timer fires; zero when it is stopped
}

// settle takes a report d of a round or a try, made at now, and schedules
// the next try of the holds that failed. Rounds and tries run side by side
// (see goRenew), so a report may come after a later round's: that round sent
// every hold again and its own reports schedule the tries, so the earlier
// report changes nothing (taken, its older next-round time would stop the
// later round's tries, and a hold whose master is failing over would wait a
// whole period for its next renewal). Reports of one round or try come node
// by node: their holds join one try, at the earliest time one of them asks.
func (r *renewRetries) settle(d renewDone, now time.Time) {
	if d.until.Before(r.until) {
		return
	}
	if d.until.After(r.until) {
		r.until, r.pending, r.next = d.until, nil, time.Time{}
		r.timer.Stop()
	}
	if len(d.failed) == 0 {
		return
	}
	r.pending = append(r.pending, d.failed...)
	wait := renewRetryMin
	if d.again {
		wait = min(2*d.wait, renewRetryMax)
	}
	at := now.Add(wait)
	if at.Before(r.until) && (r.next.IsZero() || at.Before(r.next)) {
		r.timer.Stop()
		r.timer.Reset(wait)
		r.next, r.wait = at, wait
	}
}

// take hands the holds waiting for a try to it, as the timer fired, with
// the report that try makes (without its failures).
func (r *renewRetries) take() (holds []*Hold, try renewDone) {
	holds, r.pending, r.next = r.pending, nil, time.Time{}
	return holds, renewDone{until: r.until, again: true, wait: r.wait}
}

// renewAgain sends the renewals of holds (those the watchdog still renews)
// again, reporting those that failed again node by node (see renewHolds).
func (c *Client) renewAgain(holds []*Hold, budget time.Duration, report func(failed []*Hold)) {
	ctx, cancel := context.WithTimeout(c.BackgroundContext(), budget)
	defer cancel()
	c.renewHolds(ctx, holds, c.Cfg.WatchdogTimeout, report)
}

// renewal is one script call of a round: a batch of holds of one Kind (and,
// on a cluster client, of one slot, as a script's keys must be).
type renewal struct {
	kind    *Kind
	holds   []*Hold
	tickets []Ticket
	keys    []string
	args    []string
}

// batchKey groups holds that one script call may renew together.
type batchKey struct {
	kind *Kind
	slot uint16 // 0 unless the client is a cluster client
}

// renewAll sends one round of renewals of every hold the watchdog renews (see
// renewHolds), reporting the holds whose renewal failed node by node, and
// records the round for LastRenewRound.
func (c *Client) renewAll(budget time.Duration, report func(failed []*Hold)) {
	c.mu.Lock()
	holds := make([]*Hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.BackgroundContext(), budget)
	defer cancel()
	start := time.Now()
	held, scripts := c.renewHolds(ctx, holds, c.Cfg.WatchdogTimeout, report)
	if scripts == 0 {
		return
	}
	took := time.Since(start)
	for { // rounds may overlap (see runWatchdog): number them in order of ending
		last := c.lastRound.Load()
		n := uint64(1)
		if last != nil {
			n = last.N + 1
		}
		if c.lastRound.CompareAndSwap(last, &RenewRound{N: n, Holds: held, Scripts: scripts, Took: took}) {
			break
		}
	}
}

// renewHolds renews those of holds the watchdog still renews to lease:
// batches of up to renewBatch holds per Kind and, on a cluster client, per
// slot (a script's keys must share one). A cluster client's batches go in one
// DoMulti per node (as the slot map says, see slotMap), each in a goroutine
// of its own, so that a node that does not answer holds up only the renewals
// of its slots; otherwise all go in one DoMulti. Each batch's reply applies
// on its own: a hold found gone ends with ErrLeaseLost. As each node's
// renewals end, laneDone (if not nil) is called with the holds whose renewal
// failed there, with their batch or alone (see applyRenewals); none, for a
// node whose batches all came back and renewed or found gone every hold. It
// returns how many holds and script calls it sent.
func (c *Client) renewHolds(ctx context.Context, holds []*Hold, lease time.Duration, laneDone func(failed []*Hold)) (sent, scripts int) {
	cluster := c.RC.Mode() == rueidis.ClientModeCluster
	batches, sent := renewalBatches(holds, lease, cluster)
	if len(batches) == 0 {
		return 0, 0
	}
	lanes := [][]*renewal{batches}
	if cluster {
		c.slots.refresh(ctx, c.RC)
		lanes = c.byNode(batches)
	}
	// One lane per node, each on its own: a node that does not answer
	// holds up the renewals (and the retries) of its own slots only, and
	// every other reply applies as it comes.
	run := func(lane []*renewal) {
		var failed []*Hold
		c.applyRenewals(lane, c.sendRenewals(ctx, lane), lease, func(h *Hold, batch bool) {
			if batch { // perhaps its slot moved; one hold's error says not
				c.slots.noteFailure()
			}
			failed = append(failed, h)
		})
		if laneDone != nil {
			laneDone(failed)
		}
	}
	if len(lanes) == 1 {
		run(lanes[0])
		return sent, len(batches)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() { run(lane) })
	}
	wg.Wait()
	return sent, len(batches)
}

// renewalBatches dates a renewal of each hold still the watchdog's and groups
// them into script calls of one kind (and, on a cluster, one slot) of at most
// renewBatch holds; sent counts the holds.
func renewalBatches(holds []*Hold, lease time.Duration, cluster bool) (batches []*renewal, sent int) {
	groups := make(map[batchKey][]*Hold)
	for _, h := range holds {
		k := batchKey{kind: h.kind}
		if cluster {
			k.slot = slot.Of(h.key)
		}
		groups[k] = append(groups[k], h)
	}
	for k, holds := range groups {
		for len(holds) > 0 {
			b := &renewal{kind: k.kind}
			for len(holds) > 0 && len(b.holds) < renewBatch {
				if t, ok := holds[0].sendRenewal(lease); ok {
					b.holds = append(b.holds, holds[0])
					b.tickets = append(b.tickets, t)
				}
				holds = holds[1:]
			}
			if len(b.holds) == 0 {
				continue
			}
			b.keys, b.args = k.kind.Args(b.holds, lease)
			batches = append(batches, b)
			sent += len(b.holds)
		}
	}
	return batches, sent
}

// byNode splits batches of a cluster client by the node serving their slot,
// as the slot map says (see slotMap); a slot it does not know (no map yet:
// its CLUSTER SLOTS went to a node that does not answer) gets a lane of its
// own, so that such a node cannot hold up the others' renewals meanwhile.
func (c *Client) byNode(batches []*renewal) [][]*renewal {
	index := map[string]int{}
	var lanes [][]*renewal
	for _, b := range batches {
		s := slot.Of(b.holds[0].key)
		node := c.slots.node(s)
		if node == "" {
			node = "slot " + strconv.Itoa(int(s))
		}
		i, ok := index[node]
		if !ok {
			i = len(lanes)
			index[node] = i
			lanes = append(lanes, nil)
		}
		lanes[i] = append(lanes[i], b)
	}
	return lanes
}

// applyRenewals applies the results of batches, one entry per hold: 1 a hold
// renewed, 0 found gone, -1 one whose renewal met a Redis error of its own (a
// key of the wrong type, say: the script changed nothing of it, and renewed
// the rest of its batch). failed (if not nil) is called for each hold whose
// renewal failed: batch is true for the holds of a batch that failed as a
// whole, false for a hold answered -1. Either is tried again like any failed
// renewal, and left to its expiry timer if its renewals keep failing.
func (c *Client) applyRenewals(batches []*renewal, results []rueidis.RedisResult, lease time.Duration, failed func(h *Hold, batch bool)) {
	for i, b := range batches {
		renewed, err := results[i].AsIntSlice()
		c.NoteError(err)
		if err != nil || len(renewed) != len(b.holds) {
			if failed != nil {
				for _, h := range b.holds {
					failed(h, true)
				}
			}
			continue
		}
		for j, h := range b.holds {
			switch renewed[j] {
			case 1:
				h.renewed(b.tickets[j], lease)
			case -1:
				if failed != nil {
					failed(h, false)
				}
			default:
				h.gone()
			}
		}
	}
}

// sendRenewals runs every batch's script in one DoMulti, by EVALSHA, and
// again by EVAL those a server answered NOSCRIPT (restarted or flushed).
func (c *Client) sendRenewals(ctx context.Context, batches []*renewal) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(batches))
	for i, b := range batches {
		cmds[i] = b.kind.Script.EvalSha(c.RC.B(), b.keys, b.args)
	}
	results := c.RC.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range results {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return results
	}
	cmds = cmds[:0]
	for _, i := range again {
		cmds = append(cmds, batches[i].kind.Script.Eval(c.RC.B(), batches[i].keys, batches[i].args))
	}
	for j, r := range c.RC.DoMulti(ctx, cmds...) {
		results[again[j]] = r
	}
	return results
}
