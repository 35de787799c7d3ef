package core

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
)

// AckRetryIn is how soon a waiting acquisition tries again after one that too
// few replicas acknowledged (rlock.WithReplicaAckRetry); the WAIT itself
// already took the acknowledgement timeout.
const AckRetryIn = 50 * time.Millisecond

// waitMargin is what RunAcked leaves of a ctx deadline for WAIT's reply to
// come back in.
const waitMargin = 20 * time.Millisecond

// Acking reports whether acquisitions wait for replicas (rlock.WithReplicaAck).
func (c *Client) Acking() bool { return c.Cfg.ReplicaAck > 0 }

// Unacked reports whether an acquisition that RunAcked reported acked
// replicas for falls short of what the Client asks (never without
// WithReplicaAck).
func (c *Client) Unacked(acked int64) bool {
	return c.Cfg.ReplicaAck > 0 && acked < int64(c.Cfg.ReplicaAck)
}

// NotReplicated is the error of an acquisition, run under ctx, acknowledged
// by acked replicas only (the caller names the lock). When ctx has ended,
// its deadline and not the acknowledgement timeout ended the WAIT (RunAcked
// then waits for it: see there), so the replicas were not given their time:
// the error is ctx's, not ErrNotReplicated, and a short ctx is not reported
// as replication failing.
func (c *Client) NotReplicated(ctx context.Context, acked int64) error {
	if ctx.Err() != nil {
		return fmt.Errorf("the deadline came before %d replicas acknowledged (%d did): %w", c.Cfg.ReplicaAck, max(acked, 0), CtxError(ctx))
	}
	return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, max(acked, 0), c.Cfg.ReplicaAck, c.Cfg.ReplicaAckTimeout)
}

// RunAcked runs p on one connection of the pool (in a cluster, one to the
// node serving keys' slot) and, when took says its reply is an acquisition
// (the script holds something for the caller now), sends WAIT on that same
// connection: WAIT counts the replicas that acknowledged every write of its
// connection so far, so the count covers the script's writes and everything
// before them in the replication stream (a hand-off written by a releaser's
// connection among them, as long as the script wrote something itself).
// took parses the reply into the caller's variables; its error ends the call.
// persist repeats WAIT until enough replicas acknowledged or ctx ends. Each
// WAIT ends a moment before ctx's deadline, so that it reports a count rather
// than the deadline; when ctx's deadline cut the WAIT short (or left no time
// for one) and too few acknowledged, RunAcked returns once ctx has ended, so
// that the acquisition fails with ctx's error (see NotReplicated).
//
// acked is -1 when no WAIT was sent (the script took nothing, or failed, or
// ctx left no time for one: then the acquisition counts as unacknowledged).
// When WAIT fails (a lost connection, or a user without the right to run it)
// took has already reported the acquisition, and err is WAIT's: the caller
// may hold something.
func (c *Client) RunAcked(ctx context.Context, p *lua.Pinned, keys, args []string, persist bool, took func(rueidis.RedisResult) (bool, error)) (acked int64, err error) {
	acked = -1
	err = c.RC.Dedicated(func(dc rueidis.DedicatedClient) error {
		ok, err := took(p.Exec(ctx, dc, keys, args))
		if err != nil || !ok {
			return err
		}
		for {
			timeout, cut := c.ackTimeout(ctx)
			if timeout < time.Millisecond {
				<-ctx.Done() // no time for a WAIT: the deadline decides
				return nil
			}
			// (Built afresh each time: rueidis recycles a command once sent.)
			wait := dc.B().Wait().Numreplicas(int64(c.Cfg.ReplicaAck)).Timeout(timeout.Milliseconds()).Build()
			acked, err = dc.Do(ctx, wait).AsInt64()
			switch {
			case err != nil || !c.Unacked(acked):
				return err
			case cut:
				// The deadline, not the replicas, ended the WAIT: let it
				// pass (at most a margin away), so that the caller reports
				// it (see NotReplicated) and does not retry.
				<-ctx.Done()
				return nil
			case !persist || ctx.Err() != nil:
				return nil
			}
		}
	})
	return acked, err
}

// ackTimeout is the timeout of a WAIT sent under ctx: the acknowledgement
// timeout, or less when ctx ends before it and a margin (cut), so that WAIT
// reports a count rather than the deadline.
func (c *Client) ackTimeout(ctx context.Context) (timeout time.Duration, cut bool) {
	timeout = c.Cfg.ReplicaAckTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - waitMargin; left < timeout {
			return left, true
		}
	}
	return timeout, false
}

// GiveBack undoes an acquisition that too few replicas acknowledged, at once:
// undo runs with retries for up to the unlock timeout, even when ctx has
// ended, so that a failing call leaves nothing held. When it keeps failing,
// background is started to go on trying (the lease bounds the hold anyway),
// and the last error is returned for the caller to report.
func (c *Client) GiveBack(ctx context.Context, undo func(context.Context) error, background func()) error {
	undoCtx, cancel := c.UnlockContext(ctx)
	defer cancel()
	err := RetryTransient(undoCtx, func() error {
		e := undo(undoCtx)
		c.NoteError(e)
		return e
	})
	if err != nil {
		background()
	}
	return err
}
