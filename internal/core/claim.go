package core

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
)

// Claims: a lock handed to a queued waiter is granted in Redis for the
// waiter's claim window only (a few seconds), not its whole lease, so that a
// waiter that cannot take the lock up (its process paused, or stuck with its
// connection open) holds the queue up for that long at most. The Client that
// received the grant extends it to the lease with an early renewal, sent in a
// batch with the other claims that fall due about then, a third of the claim
// window after the grant: a hold released before that never pays for it.
// Until that renewal is applied, the hold's validity is the claim window,
// dated like any grant (from a command sent before it), so it never outruns
// Redis; a claim that lapses ends the hold with ErrLeaseLost, and gives the
// lock back if the extension may have run (its reply late or lost, see
// HoldSpec.GiveBack), so that the next waiter does not wait out a whole lease.

// claimSlack lets claims due this close together share one renewal.
const claimSlack = 100 * time.Millisecond

// claimRetry is how soon a claim whose extension failed is tried again while
// its validity lasts.
const claimRetry = 100 * time.Millisecond

// StartClaimed is Start for a hold granted for claim, shorter than its lease,
// by a hand-off that the acquisition dated by t precedes: the validity is the
// claim window, and an early renewal extends it to the lease.
func (h *Hold) StartClaimed(t Ticket, claim time.Duration) {
	h.StartFrom(validUntil(t.at, claim), t.epoch)
	h.AwaitExtension(claim)
}

// AwaitExtension schedules the early renewal of a hold whose lease in Redis
// is still a claim window of claim (one taken over from a hold that awaited
// it). Call it after Start or StartFrom; it does nothing for a hold the
// watchdog does not renew.
func (h *Hold) AwaitExtension(claim time.Duration) {
	h.mu.Lock()
	if h.ended || !h.renew || claim <= 0 {
		h.mu.Unlock()
		return
	}
	h.claim = claim
	// Two thirds of the window left for the renewal to land, or all that is
	// left when the grant came late.
	h.claimDue = h.until.Add(-2 * claim / 3)
	h.mu.Unlock()
	c := h.c
	c.mu.Lock()
	if _, live := c.holds[h]; live {
		if c.claims == nil {
			c.claims = make(map[*Hold]struct{})
		}
		c.claims[h] = struct{}{}
	}
	c.mu.Unlock()
	select {
	case c.claimWake <- struct{}{}:
	default:
	}
}

// Claim is the claim window of a hold still awaiting its extension, 0 when
// its lease in Redis is the whole lease.
func (h *Hold) Claim() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claim
}

// nextClaim is when the earliest pending claim falls due; ok is false when
// none is pending. Claims extended or ended meanwhile are forgotten.
func (c *Client) nextClaim() (due time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.claims {
		h.mu.Lock()
		d, pending := h.claimDue, h.claim > 0 && !h.ended
		h.mu.Unlock()
		if !pending {
			delete(c.claims, h)
			continue
		}
		if !ok || d.Before(due) {
			due, ok = d, true
		}
	}
	return due, ok
}

// armClaims sets timer for the earliest pending claim.
func (c *Client) armClaims(timer *time.Timer) {
	timer.Stop()
	if due, ok := c.nextClaim(); ok {
		timer.Reset(max(time.Until(due), 0))
	}
}

// extendClaims renews, in batches per Kind (and slot, see renewHolds), every
// pending claim due within claimSlack, to the watchdog's lease, in a
// background goroutine. A renewal that fails is tried again after
// claimRetry; one that finds the hold gone ends it with ErrLeaseLost.
func (c *Client) extendClaims() {
	now := time.Now()
	var due []*Hold
	var budget time.Duration
	c.mu.Lock()
	for h := range c.claims {
		h.mu.Lock()
		at, pending, left := h.claimDue, h.claim > 0 && !h.ended, h.until.Sub(now)
		h.mu.Unlock()
		if pending && !at.After(now.Add(claimSlack)) {
			due = append(due, h)
			if budget == 0 || left < budget {
				budget = left
			}
		}
	}
	c.mu.Unlock()
	if len(due) == 0 {
		return
	}
	// In flight: not due again before its validity ends (the expiry timer
	// ends it then anyway), unless the extension fails first.
	for _, h := range due {
		h.mu.Lock()
		h.claimDue = h.until
		h.mu.Unlock()
	}
	// In a goroutine, so that a node that does not answer holds up neither
	// the watchdog nor the claims of other nodes (see renewHolds).
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		// Worth waiting for while the earliest validity lasts.
		ctx, cancel := context.WithTimeout(c.BackgroundContext(), max(budget, claimRetry))
		defer cancel()
		// Node by node (see renewHolds): a node that hangs holds up no
		// other node's retries.
		c.renewHolds(ctx, due, c.Cfg.WatchdogTimeout, func(failed []*Hold) {
			if len(failed) == 0 {
				return
			}
			for _, h := range failed {
				h.mu.Lock()
				if h.claim > 0 {
					h.claimDue = time.Now().Add(claimRetry)
				}
				h.mu.Unlock()
			}
			select { // re-arm the watchdog's claim timer for the retries
			case c.claimWake <- struct{}{}:
			default:
			}
		})
	}()
}

// ParseNotice decodes the data of a message telling a queued waiter that what
// it waits for was just handed to the waiter(s) ahead of it for ms
// milliseconds (a claim window): "~" + ms, at most max. Anyone may publish
// one; it only makes the waiter re-check sooner: never later than it planned
// to (see the waiters' try), and it never displaces a grant or an earlier
// re-check kept for the waiter (see KeepData).
func ParseNotice(data string, max time.Duration) (time.Duration, bool) {
	digits, ok := strings.CutPrefix(data, "~")
	if !ok || len(digits) == 0 || len(digits) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 || time.Duration(n)*time.Millisecond > max {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// KeepData is the rule by which a queued waiter keeps the data of a message
// addressed to it until it takes it (see mux.Waiter.SetTagKeeping). A waiter has
// one slot, and anyone may publish on its channel: a message that proves
// nothing may make it re-check sooner, nothing else. So a grant proven with
// the waiter's secret (proven reports it, with its number: a later grant's is
// higher) is kept against everything but a later proven grant; any other
// message that is not a notice (it makes the waiter re-check now) is kept
// against notices; and of two notices (see ParseNotice, max as there), the
// one that has the waiter re-check sooner. keep reports whether held stays.
func KeepData(proven func(data string) (uint64, bool), max time.Duration) (keep func(held, next string) bool) {
	return func(held, next string) bool {
		hc, ho := rankData(held, proven, max)
		nc, no := rankData(next, proven, max)
		return hc > nc || hc == nc && ho > no
	}
}

// rankData classes data for KeepData: 2 a proven grant (ordered by its
// number), 1 a re-check now, 0 a notice (ordered by how soon it re-checks).
func rankData(data string, proven func(string) (uint64, bool), max time.Duration) (class int, order uint64) {
	if n, ok := proven(data); ok {
		return 2, n
	}
	if d, ok := ParseNotice(data, max); ok {
		return 0, math.MaxUint64 - uint64(d)
	}
	return 1, 0
}
