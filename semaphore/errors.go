package semaphore

import (
	"errors"

	"github.com/relockio/relock/internal/core"
)

// Errors returned (wrapped, with detail) by this package. Check them with
// errors.Is. A command refused to the Redis user (an ACL changed after
// rlock.New) fails the call with an error matching rlock.ErrPermission that
// names it; the script refused changed nothing (Redis 7 and later).
var (
	// ErrNoPermits reports that TryAcquire or Drain found too few permits free.
	ErrNoPermits = errors.New("semaphore: no permits available")
	// ErrNotHeld reports that the context passed holds no permit of the
	// semaphore (never acquired, already released, or its lease expired: then
	// the error also matches ErrLeaseLost). Passing Release the context given
	// to Acquire instead of the permit context it returned is the usual
	// mistake; the message then says so.
	ErrNotHeld = errors.New("semaphore: permit not held")
	// ErrNoLimit reports a semaphore whose limit was never set.
	ErrNoLimit = errors.New("semaphore: no limit set")
	// ErrExceedsLimit reports a request for more permits than the limit: it
	// could never be granted, so it fails at once.
	ErrExceedsLimit = errors.New("semaphore: request exceeds the limit")
	// ErrInvalidName reports an unusable semaphore name.
	ErrInvalidName = errors.New("semaphore: invalid name")
	// ErrInvalidCount reports a permit count or limit out of range.
	ErrInvalidCount = errors.New("semaphore: invalid count")
	// ErrInvalidLease reports a lease or wait timeout out of its range (see
	// MinLease, MaxLease and MaxWaitTimeout).
	ErrInvalidLease = errors.New("semaphore: invalid lease")
	// ErrReleased is the cause of a permit context cancelled by Release.
	ErrReleased = errors.New("semaphore: released")
	// ErrInvalidClient reports a nil rlock.Client.
	ErrInvalidClient = errors.New("semaphore: invalid client")
	// ErrInvalidOption reports any other argument that cannot be used, such
	// as a nil context.
	ErrInvalidOption = errors.New("semaphore: invalid option")

	// ErrLeaseLost is the cause of a permit context whose lease ended without
	// Release. It reads "semaphore: lease lost" and also matches
	// rlock.ErrLeaseLost: errors.Is(cause, rlock.ErrLeaseLost) holds for a
	// permit context as for a lock context.
	ErrLeaseLost = core.Rebrand("semaphore: lease lost", core.ErrLeaseLost)
	// ErrClosed reports use of a closed Client; it is rlock.ErrClosed.
	ErrClosed = core.ErrClosed
	// ErrAbandoned is matched by the error of a Release that failed, and by
	// the cause of its permit context: the permits were given up and free
	// themselves within one lease (see AbandonError); it is rlock.ErrAbandoned.
	ErrAbandoned = core.ErrAbandoned
	// ErrUnavailable reports an Acquire that ended while Redis could not be
	// reached (it wraps the last connection error); ErrNoPermits is reported
	// only when Redis said the permits are taken. It is rlock.ErrUnavailable.
	ErrUnavailable = core.ErrUnavailable
	// ErrNotReplicated reports, with rlock.WithReplicaAck on the Client, an
	// acquisition that fewer replicas than asked acknowledged in time; it was
	// undone before the error was returned (see Semaphore.Acquire). It is
	// rlock.ErrNotReplicated.
	ErrNotReplicated = core.ErrNotReplicated
)

// AbandonError is the error of a Release that failed: the permits were given
// up, and Redis frees them by FreeBy at the latest.
type AbandonError = core.AbandonError
