package core

import (
	"context"
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
	for {
		select {
		case <-ticker.C:
			// A slow renewal is still worth having while the lease lasts:
			// give it two periods (a third of the lease stays as margin).
			failed := c.renewAll(2 * period)
			retry.until = time.Now().Add(period)
			retry.arm(failed, renewRetryMin)
		case <-retry.timer.C:
			failed := c.renewAgain(retry.holds, 2*period)
			retry.arm(failed, 2*retry.wait)
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

// renewRetryMin is how soon a renewal that failed is first tried again. A
// connection broken by a restart of Redis (which, persisting every write,
// kept the lease) fails the first command sent on it, and the next period
// may come too late for a lease of a second or so.
const renewRetryMin = 20 * time.Millisecond

// renewRetries are the holds whose renewal failed in the watchdog's last
// round: each try that fails waits twice as long as the one before, until
// the next round, which renews them anyway.
type renewRetries struct {
	timer *time.Timer
	holds []*Hold
	wait  time.Duration
	until time.Time // when the next round is due
}

// arm schedules a try of holds in wait, unless none failed or the next round
// comes first.
func (r *renewRetries) arm(holds []*Hold, wait time.Duration) {
	r.timer.Stop()
	r.holds, r.wait = holds, wait
	if len(holds) > 0 && time.Now().Add(wait).Before(r.until) {
		r.timer.Reset(wait)
	}
}

// renewAgain sends the renewals of holds (those the watchdog still renews)
// again, and returns those that failed again.
func (c *Client) renewAgain(holds []*Hold, budget time.Duration) (failed []*Hold) {
	ctx, cancel := context.WithTimeout(c.BackgroundContext(), budget)
	defer cancel()
	c.renewHolds(ctx, holds, c.Cfg.WatchdogTimeout, func(h *Hold) { failed = append(failed, h) })
	return failed
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
// renewHolds), records it for LastRenewRound, and returns the holds whose
// renewal failed.
func (c *Client) renewAll(budget time.Duration) (failed []*Hold) {
	c.mu.Lock()
	holds := make([]*Hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.BackgroundContext(), budget)
	defer cancel()
	start := time.Now()
	held, scripts := c.renewHolds(ctx, holds, c.Cfg.WatchdogTimeout, func(h *Hold) { failed = append(failed, h) })
	if scripts == 0 {
		return nil
	}
	n := c.LastRenewRound().N + 1 // only the watchdog goroutine stores rounds
	c.lastRound.Store(&RenewRound{N: n, Holds: held, Scripts: scripts, Took: time.Since(start)})
	return failed
}

// renewHolds renews those of holds the watchdog still renews to lease:
// batches of up to renewBatch holds per Kind and, on a cluster client, per
// slot (a script's keys must share one), all sent in one DoMulti, which a
// cluster client splits per node and pipelines to every node at once. Each
// batch's reply applies on its own, so a node that fails costs only the
// renewals of its slots: a hold found gone ends with ErrLeaseLost, and failed
// (if not nil) is called for each hold of a batch that failed. It returns how
// many holds and script calls it sent.
func (c *Client) renewHolds(ctx context.Context, holds []*Hold, lease time.Duration, failed func(*Hold)) (sent, scripts int) {
	cluster := c.RC.Mode() == rueidis.ClientModeCluster
	groups := make(map[batchKey][]*Hold)
	for _, h := range holds {
		k := batchKey{kind: h.kind}
		if cluster {
			k.slot = slot.Of(h.Key)
		}
		groups[k] = append(groups[k], h)
	}
	var batches []*renewal
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
	if len(batches) == 0 {
		return 0, 0
	}
	results := c.sendRenewals(ctx, batches)
	for i, b := range batches {
		renewed, err := results[i].AsIntSlice()
		c.NoteError(err)
		if err != nil || len(renewed) != len(b.holds) {
			if failed != nil {
				for _, h := range b.holds {
					failed(h)
				}
			}
			continue
		}
		for j, h := range b.holds {
			if renewed[j] == 1 {
				h.renewed(b.tickets[j], lease)
			} else {
				h.gone()
			}
		}
	}
	return sent, len(batches)
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
