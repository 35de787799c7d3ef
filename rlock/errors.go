package rlock

import (
	"errors"
	"fmt"

	"github.com/relockio/relock/internal/core"
)

// Errors returned (wrapped, with detail) by this package. Check them with errors.Is.
var (
	// ErrLocked reports that another owner holds the lock: TryLock's answer, and
	// Lock's when its WithWaitTimeout runs out (or ctx's deadline, which the
	// error matches too) after Redis said so.
	ErrLocked = errors.New("rlock: locked by another owner")
	// ErrNotHeld reports that the context passed does not hold the lock (it never
	// did, was already fully unlocked, or the lease ran out). The usual mistake
	// is passing Unlock the context given to Lock instead of the lock context
	// Lock returned; the error's message then says which context to pass (or
	// which Client holds the lock through it).
	ErrNotHeld = errors.New("rlock: not held")
	// ErrLeaseLost is the cause (context.Cause) of a lock context cancelled
	// because its hold ended without Unlock: the key was deleted or expired,
	// renewals failed for longer than the lease, a WithLease lease ran out, or the
	// Client was closed.
	ErrLeaseLost = core.ErrLeaseLost
	// ErrUnlocked is the cause of a lock context cancelled by its final Unlock.
	ErrUnlocked = core.ErrUnlocked
	// ErrUpgrade reports a Lock (or TryLock) of an RWMutex with a context that
	// holds its read lock but not its write lock: an upgrade, refused because
	// two readers upgrading at once would wait for each other forever.
	// RUnlock first, then Lock (and check again what the read showed).
	ErrUpgrade = errors.New("rlock: upgrade from read to write lock refused")
	// ErrInvalidName reports a lock name or key prefix that cannot be used.
	ErrInvalidName = errors.New("rlock: invalid name")
	// ErrInvalidLease reports a lease, watchdog timeout or other duration
	// option out of its range (see the Min* and Max* constants).
	ErrInvalidLease = errors.New("rlock: invalid lease")
	// ErrInvalidOption reports any other option value out of range.
	ErrInvalidOption = errors.New("rlock: invalid option")
	// ErrClosed reports use of a Client after Close.
	ErrClosed = core.ErrClosed
	// ErrUnavailable reports a Lock (or TryLock) that ended while Redis could
	// not be reached (or refused the command): the error also wraps the last
	// connection or Redis error, so errors.Is finds, say, syscall.ECONNREFUSED.
	// ErrLocked is reported only when Redis said another owner holds the lock.
	ErrUnavailable = core.ErrUnavailable
	// ErrAbandoned reports a hold the Client gave up because the outcome of
	// a command on it could not be learned: an Unlock, or a re-entry, that
	// failed after its retries (Redis unreachable for longer than the unlock
	// timeout, or the command denied). Renewals stop, so Redis frees the lock
	// within one lease; the lock context is cancelled with a cause matching
	// ErrLeaseLost and ErrAbandoned. The error is an *AbandonError, whose
	// FreeBy says when the lock is free at the latest.
	ErrAbandoned = core.ErrAbandoned
	// ErrNoQuorum reports a quorum lock (Quorum) that could not be taken on a
	// majority of its masters because too many of them could not be reached
	// (the error also matches ErrUnavailable and wraps the last connection
	// error), or because the acquisition took longer than the lease allows.
	// A majority held by another owner is ErrLocked instead.
	ErrNoQuorum = errors.New("rlock: no quorum")
	// ErrNotReplicated reports, with WithReplicaAck, an acquisition (or
	// re-entry) that fewer replicas than asked acknowledged within the
	// timeout (for a quorum lock: a round that had a majority only counting
	// such votes). It was undone before the error was returned: the lock is not
	// held by the call (a re-entry leaves the outer hold as it was). When the
	// undo could not be confirmed, the error says so: an acquisition is then
	// given back in the background (and expires with its lease at the
	// latest), and a re-entry's whole hold is given up (ErrAbandoned).
	ErrNotReplicated = core.ErrNotReplicated
)

// AbandonError is the error of an Unlock or re-entry that gave its hold up:
// see ErrAbandoned.
type AbandonError = core.AbandonError

// errZero is what the methods of a zero value (a Client not made by New, a
// lock not made by a Client) return: they have nothing to work with.
func errZero(what, maker string) error {
	return fmt.Errorf("%w: a zero %s: make it with %s", ErrInvalidOption, what, maker)
}
