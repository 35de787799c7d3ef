package core

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// renewBatch caps the holds renewed by one script call, so that one call
// never blocks Redis for long.
const renewBatch = 256

// runWatchdog renews every watchdog hold of the Client each third of the
// watchdog timeout, in batches per Kind. A renewal that finds a hold gone ends
// it with ErrLeaseLost; a renewal that fails leaves the hold to its expiry
// timer, which fires when the last confirmed lease runs out.
func (c *Client) runWatchdog() {
	defer c.bg.Done()
	period := c.Cfg.WatchdogTimeout / 3
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	claims := time.NewTimer(time.Hour)
	claims.Stop()
	defer claims.Stop()
	for {
		select {
		case <-ticker.C:
			// A slow renewal is still worth having while the lease lasts:
			// give it two periods (a third of the lease stays as margin).
			c.renewAll(2 * period)
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

func (c *Client) renewAll(budget time.Duration) {
	byKind := make(map[*Kind][]*Hold)
	c.mu.Lock()
	for h := range c.holds {
		byKind[h.kind] = append(byKind[h.kind], h)
	}
	c.mu.Unlock()

	batch := renewBatch
	if c.RC.Mode() == rueidis.ClientModeCluster {
		batch = 1 // keys of different locks live in different slots
	}
	ctx, cancel := context.WithTimeout(c.BackgroundContext(), budget)
	defer cancel()
	lease := c.Cfg.WatchdogTimeout
	for kind, holds := range byKind {
		for len(holds) > 0 {
			n := min(batch, len(holds))
			c.renewGroup(ctx, kind, holds[:n], lease, nil)
			holds = holds[n:]
		}
	}
}

// renewGroup renews those of holds the watchdog still renews in one call of
// kind's script: a hold found gone ends with ErrLeaseLost, and failed (if not
// nil) is called for each hold sent when the call fails.
func (c *Client) renewGroup(ctx context.Context, kind *Kind, holds []*Hold, lease time.Duration, failed func(*Hold)) {
	group := make([]*Hold, 0, len(holds))
	tickets := make([]Ticket, 0, len(holds))
	for _, h := range holds {
		if t, ok := h.sendRenewal(lease); ok {
			group = append(group, h)
			tickets = append(tickets, t)
		}
	}
	if len(group) == 0 {
		return
	}
	renewed, err := kind.Renew(ctx, c, group, lease)
	c.NoteError(err)
	if err != nil || len(renewed) != len(group) {
		if failed != nil {
			for _, h := range group {
				failed(h)
			}
		}
		return
	}
	for i, h := range group {
		if renewed[i] == 1 {
			h.renewed(tickets[i], lease)
		} else {
			h.gone()
		}
	}
}
