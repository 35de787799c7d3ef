package semaphore

import (
	"fmt"
	"time"

	"github.com/relockio/relock/rlock"
)

// Bounds of the duration options, the same as package rlock's (see there for
// why): Acquire, TryAcquire and Drain reject a value outside them with an
// error matching ErrInvalidLease that names the option, the value and the range.
const (
	// MinLease is the shortest WithLease accepted (1ms).
	MinLease = rlock.MinLease
	// MaxLease is the longest WithLease accepted (30 days).
	MaxLease = rlock.MaxLease
	// MaxWaitTimeout is the longest WithWaitTimeout accepted (30 days).
	MaxWaitTimeout = rlock.MaxWaitTimeout
)

// AcquireOption configures one Acquire, TryAcquire or Drain call.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	lease, waitTimeout time.Duration
	leaseSet, waitSet  bool
	// tryOnce: WithWaitTimeout(0) was given, which means exactly one attempt,
	// as TryAcquire. waitSet is also true with waitTimeout 0, so that a caller
	// that does not look at tryOnce still waits no longer than the attempt.
	tryOnce bool
}

func newAcquireConfig(opts []AcquireOption) (acquireConfig, error) {
	var ac acquireConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&ac)
		}
	}
	if ac.leaseSet {
		if err := checkRange("WithLease", ac.lease, MinLease, MaxLease); err != nil {
			return ac, err
		}
	}
	if ac.waitSet {
		if err := checkRange("WithWaitTimeout", ac.waitTimeout, 0, MaxWaitTimeout); err != nil {
			return ac, err
		}
		ac.tryOnce = ac.waitTimeout == 0
	}
	return ac, nil
}

func checkRange(option string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%w: %s(%v) is out of range: must be between %v and %v", ErrInvalidLease, option, d, lo, hi)
	}
	return nil
}

// WithLease gives the permits a fixed lease: no watchdog renews them, and the
// permit context is cancelled with ErrLeaseLost when it ends. Default: the
// Client's watchdog keeps them until Release. Allowed MinLease (1ms) to
// MaxLease (30 days). Permits with a fixed lease end by themselves: when the
// program drops their permit context without Release, they are left to their
// lease, not released at the next garbage collection (see rlock.WithLease).
func WithLease(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.lease, c.leaseSet = d, true }
}

// WithWaitTimeout bounds how long Acquire waits, without bounding the hold.
// It starts once Acquire has had an answer from Redis (ctx alone bounds that
// first round trip), so however short, it ends an Acquire only after Redis
// said the permits are taken: when it runs out Acquire fails with an error
// matching ErrNoPermits and context.DeadlineExceeded (ErrUnavailable instead
// when Redis could no longer be reached). Default: wait until ctx is done.
//
// WithWaitTimeout(0) means one attempt and no wait, as TryAcquire: when the
// permits are not free the error matches ErrNoPermits. Negative values are
// rejected, and so are values above MaxWaitTimeout (30 days).
func WithWaitTimeout(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.waitTimeout, c.waitSet = d, true }
}
