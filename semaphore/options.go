package semaphore

import (
	"fmt"
	"time"
)

// AcquireOption configures one Acquire, TryAcquire or Drain call.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	lease, waitTimeout time.Duration
	leaseSet, waitSet  bool
}

func newAcquireConfig(opts []AcquireOption) (acquireConfig, error) {
	var ac acquireConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&ac)
		}
	}
	if ac.leaseSet && ac.lease < time.Millisecond {
		return ac, fmt.Errorf("%w: lease must be at least 1ms, got %v", ErrInvalidLease, ac.lease)
	}
	if ac.waitSet && ac.waitTimeout <= 0 {
		return ac, fmt.Errorf("%w: wait timeout must be positive, got %v", ErrInvalidLease, ac.waitTimeout)
	}
	return ac, nil
}

// WithLease gives the permits a fixed lease: no watchdog renews them, and the
// permit context is cancelled with ErrLeaseLost when it ends. Default: the
// Client's watchdog keeps them until Release.
func WithLease(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.lease, c.leaseSet = d, true }
}

// WithWaitTimeout bounds how long Acquire waits, without bounding the hold.
// When it runs out Acquire fails with an error matching ErrNoPermits and
// context.DeadlineExceeded. Default: wait until ctx is done.
func WithWaitTimeout(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.waitTimeout, c.waitSet = d, true }
}
