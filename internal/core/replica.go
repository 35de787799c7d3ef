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

// NotReplicated is the error of an acquisition acknowledged by acked replicas
// only (the caller names the lock).
func (c *Client) NotReplicated(acked int64) error {
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
// than the deadline.
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
			timeout := c.Cfg.ReplicaAckTimeout
			if dl, ok := ctx.Deadline(); ok {
				// A WAIT cut short by ctx would only report the deadline:
				// one that ends before it reports how many acknowledged.
				left := time.Until(dl) - waitMargin
				if left < time.Millisecond {
					return nil
				}
				timeout = min(timeout, left)
			}
			// (Built afresh each time: rueidis recycles a command once sent.)
			wait := dc.B().Wait().Numreplicas(int64(c.Cfg.ReplicaAck)).Timeout(max(timeout.Milliseconds(), 1)).Build()
			acked, err = dc.Do(ctx, wait).AsInt64()
			if err != nil || !c.Unacked(acked) || !persist || ctx.Err() != nil {
				return err
			}
		}
	})
	return acked, err
}

// GiveBack undoes an acquisition that too few replicas acknowledged, at once:
// undo runs with retries for up to the unlock timeout, even when ctx has
// ended, so that a failing call leaves nothing held. When it keeps failing,
// background is started to go on trying (the lease bounds the hold anyway),
// and the last error is returned for the caller to report.
func (c *Client) GiveBack(ctx context.Context, undo func(context.Context) error, background func()) error {
	undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Cfg.UnlockTimeout)
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
