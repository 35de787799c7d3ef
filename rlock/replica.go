package rlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

// Bounds of WithReplicaAck's timeout: WAIT counts in milliseconds (and 0 would
// mean forever), and a Lock blocks for up to the timeout per acquisition.
const (
	MinReplicaAckTimeout = time.Millisecond
	MaxReplicaAckTimeout = time.Minute
)

// WithReplicaAck makes every acquisition of the Client's locks and
// semaphores wait until at least replicas replicas of the master have
// acknowledged it, for up to timeout: the script that takes the lock is
// followed by WAIT replicas timeout on the same connection (in a cluster, the
// connection to the node serving the lock's slot). It covers:
//
//   - Mutex and FairMutex: Lock and TryLock, a lock handed over by a release
//     (confirmed with a round trip instead of taken from its message), and
//     re-entries;
//   - RWMutex: RLock, TryRLock, Lock and TryLock, a lock granted by a release
//     (a woken waiter always confirms it with a round trip), the read lock a
//     writer takes under its write lock, and re-entries;
//   - semaphores (package semaphore, on this Client): Acquire, TryAcquire and
//     Drain, and permits handed over by a release (confirmed with a round
//     trip);
//   - quorum locks (in QuorumOptions.ClientOptions): each master's vote, which
//     counts only when that master's replicas acknowledged it (see Quorum).
//
// When fewer acknowledge in time, the acquisition is undone (the lock or
// permits are given back, a re-entry's count taken back) and the call fails
// with an error matching ErrNotReplicated, unless WithReplicaAckRetry is
// given. When the call's ctx ends before the acknowledgement timeout (the
// WAIT runs until a moment before ctx's deadline, or is not sent when less
// is left), the call fails once ctx has ended, with ctx's error and not
// ErrNotReplicated: the replicas were not given their time.
//
// What it buys: a lock Lock returned is on the master and on at least replicas
// replicas, so a failover (Sentinel or Cluster) that promotes one of those
// keeps it. What it does not: WAIT does not make Redis strongly consistent. A
// failover may promote a replica that did not acknowledge (with one replica
// asked for out of two, say), the acknowledgement is of receipt, not of a
// write to disk, and renewals, releases and queue changes are not waited for,
// so a failover can still resurrect a released lock or lose a renewal (the
// holder then learns of the loss through its lock context, ErrLeaseLost). It
// narrows the window in which a failover loses a fresh lock; it does not close
// it. Protect the resource with the fencing token (Mutex.Token).
//
// Each acquisition pays one more round trip plus the replication delay, and
// holds a connection of the rueidis client's pool for it. A lock or permit
// passed between goroutines of one Client (see the package documentation on
// cohorts and turns, and semaphore's turns) writes nothing new in Redis and
// is not acknowledged again; nor is a quorum lock's re-entry, counted in the
// process. New's permission probe checks that the user may run WAIT.
//
// replicas must be at least 1 and timeout between MinReplicaAckTimeout (1ms)
// and MaxReplicaAckTimeout (1m). Default: off (no WAIT).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) { c.ackReplicas, c.ackTimeout, c.ackSet = replicas, timeout, true }
}

// WithReplicaAckRetry changes what WithReplicaAck does when too few replicas
// acknowledge in time: instead of failing with ErrNotReplicated, a blocking
// call (Lock, RLock, semaphore Acquire, quorum Lock) gives the acquisition
// back and tries again, queued like any waiter (at the tail: the place it
// had is given back too), until enough replicas acknowledge one or its ctx
// (or wait timeout) ends; the error then matches ErrNotReplicated too. A
// re-entry, whose hold the watchdog keeps meanwhile, repeats WAIT for up to
// the unlock timeout (WithUnlockTimeout) before it is taken back; so does the
// read lock a writer takes under its write lock, while RLock's ctx lasts. The
// non-blocking calls (TryLock, TryRLock, TryAcquire, Drain) still make one
// attempt and fail with ErrNotReplicated. It requires WithReplicaAck.
func WithReplicaAckRetry() Option {
	return func(c *config) { c.ackRetry = true }
}

func (c *config) validateReplicaAck() error {
	if !c.ackSet {
		if c.ackRetry {
			return fmt.Errorf("%w: WithReplicaAckRetry needs WithReplicaAck", ErrInvalidOption)
		}
		return nil
	}
	if c.ackReplicas < 1 {
		return fmt.Errorf("%w: WithReplicaAck(%d, ...): the number of replicas must be at least 1", ErrInvalidOption, c.ackReplicas)
	}
	return checkRange("WithReplicaAck timeout", c.ackTimeout, MinReplicaAckTimeout, MaxReplicaAckTimeout)
}

// ackRetryIn is how soon a waiting Lock tries again after an acquisition that
// too few replicas acknowledged (the WAIT itself already took the timeout).
const ackRetryIn = core.AckRetryIn

// notReplicated is the error of an acquisition acknowledged by acked replicas
// only (the caller names the lock).
func notReplicated(ctx context.Context, c *core.Client, acked int64) error {
	return c.NotReplicated(ctx, acked)
}

// acquireAcked runs acquire.lua and, when it took the lock (or re-entered),
// WAIT on the same connection (see core.Client.RunAcked). acked is -1 when no
// WAIT was sent. When WAIT fails, r still has status 1 with the error: the
// lock may be held.
func acquireAcked(ctx context.Context, c *core.Client, keys, args []string, persist bool) (r acquireReply, acked int64, err error) {
	acked, err = c.RunAcked(ctx, lua.AcquireOn, keys, args, persist, func(res rueidis.RedisResult) (bool, error) {
		vals, err := lua.Ints(res)
		if err != nil {
			return false, err
		}
		r, err = parseAcquireReply(vals)
		return err == nil && r.status == 1, err
	})
	return r, acked, err
}
