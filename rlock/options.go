package rlock

import (
	"fmt"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
)

// Default values of the Client options.
const (
	DefaultWatchdogTimeout = 30 * time.Second
	DefaultKeyPrefix       = "rlock"
	DefaultUnlockTimeout   = 5 * time.Second
	DefaultNoExpiryPoll    = time.Second
)

// Option configures a Client. Options are checked by New.
type Option func(*config)

type config struct {
	watchdogTimeout time.Duration
	keyPrefix       string
	unlockTimeout   time.Duration
	noExpiryPoll    time.Duration
	pubsubOpts      []pubsub.Option
}

func defaultConfig() config {
	return config{
		watchdogTimeout: DefaultWatchdogTimeout,
		keyPrefix:       DefaultKeyPrefix,
		unlockTimeout:   DefaultUnlockTimeout,
		noExpiryPoll:    DefaultNoExpiryPoll,
	}
}

func (c *config) validate() error {
	if c.watchdogTimeout <= 0 {
		return fmt.Errorf("%w: watchdog timeout must be positive, got %v", ErrInvalidLease, c.watchdogTimeout)
	}
	if c.watchdogTimeout < 3*time.Millisecond {
		return fmt.Errorf("%w: watchdog timeout must be at least 3ms, got %v", ErrInvalidLease, c.watchdogTimeout)
	}
	if c.unlockTimeout <= 0 {
		return fmt.Errorf("%w: unlock timeout must be positive, got %v", ErrInvalidLease, c.unlockTimeout)
	}
	if c.noExpiryPoll <= 0 {
		return fmt.Errorf("%w: no-expiry poll interval must be positive, got %v", ErrInvalidLease, c.noExpiryPoll)
	}
	return core.ValidatePrefix(c.keyPrefix, ErrInvalidName)
}

func (c *config) core() core.Config {
	return core.Config{
		WatchdogTimeout: c.watchdogTimeout,
		UnlockTimeout:   c.unlockTimeout,
		NoExpiryPoll:    c.noExpiryPoll,
		KeyPrefix:       c.keyPrefix,
	}
}

// WithWatchdogTimeout sets the lease of holds taken without WithLease. The
// watchdog renews such holds every third of it while they are held, so a
// crashed holder's lock is free again at most this long after its last renewal.
// Default 30s.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *config) { c.watchdogTimeout = d }
}

// WithKeyPrefix namespaces every key and pub/sub channel of the Client:
// a lock named n lives at "<prefix>:{n}". Pub/sub channels ignore the database
// number, so Clients sharing a server but not locks need distinct prefixes.
// Default "rlock"; "" means no prefix. The prefix must not contain braces.
func WithKeyPrefix(p string) Option {
	return func(c *config) { c.keyPrefix = p }
}

// WithUnlockTimeout bounds how long Unlock keeps retrying a release whose
// outcome is unknown (connection errors). Unlock does not stop when the lock
// context is cancelled, which it is when the lease is lost; this bound applies
// instead. Default 5s.
func WithUnlockTimeout(d time.Duration) Option {
	return func(c *config) { c.unlockTimeout = d }
}

// WithNoExpiryPoll sets how often a waiter re-checks a lock whose key has no
// expiry (set by hand, outside this library), where there is no lease to wait
// out. Default 1s.
func WithNoExpiryPoll(d time.Duration) Option {
	return func(c *config) { c.noExpiryPoll = d }
}

// WithPubSub passes options to the Client's subscription multiplexer, for
// example pubsub.WithConnections(4) or pubsub.WithLinger(0).
func WithPubSub(opts ...pubsub.Option) Option {
	return func(c *config) { c.pubsubOpts = append(c.pubsubOpts, opts...) }
}

// LockOption configures one Lock or TryLock call.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease       time.Duration // 0: watchdog
	waitTimeout time.Duration // 0: until ctx is done
	leaseSet    bool
	waitSet     bool
}

func newLockConfig(opts []LockOption) (lockConfig, error) {
	var lc lockConfig
	if len(opts) == 0 {
		return lc, nil // the common case, without making lc escape
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&lc)
		}
	}
	if lc.leaseSet && lc.lease <= 0 {
		return lc, fmt.Errorf("%w: lease must be positive, got %v", ErrInvalidLease, lc.lease)
	}
	if lc.leaseSet && lc.lease < time.Millisecond {
		return lc, fmt.Errorf("%w: lease must be at least 1ms, got %v", ErrInvalidLease, lc.lease)
	}
	if lc.waitSet && lc.waitTimeout <= 0 {
		return lc, fmt.Errorf("%w: wait timeout must be positive, got %v", ErrInvalidLease, lc.waitTimeout)
	}
	return lc, nil
}

// WithLease gives the hold a fixed lease: no watchdog renews it, and its lock
// context is cancelled with ErrLeaseLost when the lease ends (slightly before
// Redis expires the key, to allow for clock drift). On re-entry it re-sets the
// hold's lease. Default: the watchdog keeps the hold until Unlock.
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.lease, c.leaseSet = d, true }
}

// WithWaitTimeout bounds how long Lock waits for the lock, without bounding the
// hold: the returned context derives from Lock's ctx, not from this timeout.
// When it runs out, Lock fails with an error matching ErrLocked and
// context.DeadlineExceeded. Default: wait until ctx is done.
func WithWaitTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) { c.waitTimeout, c.waitSet = d, true }
}
