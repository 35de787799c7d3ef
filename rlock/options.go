package rlock

import (
	"context"
	"fmt"
	"log/slog"
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
	DefaultLinger          = time.Millisecond
	DefaultClaimWindow     = 3 * time.Second
)

// Bounds of the duration options. New, Lock and TryLock reject a value outside
// them with an error naming the option, the value and the range. They keep
// every computation the library makes on a duration (doubling, 4/5, adding a
// second, milliseconds sent to Redis and added to its clock in Lua) far from
// overflow and within Redis's expiry limits, and they refuse values that can
// only be mistakes.
const (
	// MinWatchdogTimeout (300ms): the watchdog renews every third of the
	// timeout and gives a renewal the other two thirds, the same schedule as
	// a claim's early renewal (see MinClaimWindow), and a lock handed over to
	// a watchdog hold is claimed for at most the timeout. Below 300ms a
	// renewal has under 200ms for its round trip, and a loaded machine (a GC
	// pause, -race) loses holds and hand-offs.
	MinWatchdogTimeout = 300 * time.Millisecond
	// MaxWatchdogTimeout: a crashed holder keeps its lock, and a vanished
	// waiter its queue place (two timeouts), this long; a day is far beyond
	// any sensible setting (the default is 30s).
	MaxWatchdogTimeout = 24 * time.Hour
	// MinUnlockTimeout: a shorter bound would fail releases that merely took
	// a slow round trip.
	MinUnlockTimeout = 10 * time.Millisecond
	// MaxUnlockTimeout: Unlock blocks its caller up to this long, and every
	// release leaves a small idempotency key in Redis for the timeout plus 1s;
	// a longer bound only piles those keys up.
	MaxUnlockTimeout = time.Minute
	// MinNoExpiryPoll and MaxNoExpiryPoll bound the re-check interval of a
	// lock without expiry: shorter would poll Redis in a tight loop.
	MinNoExpiryPoll = 10 * time.Millisecond
	MaxNoExpiryPoll = time.Hour
	// MinLease is the shortest WithLease accepted (1ms, the resolution of
	// Redis expiries).
	MinLease = time.Millisecond
	// MaxLease is the longest WithLease accepted: 30 days, far beyond any
	// critical section, and small enough (2.6e9ms, below 2^32) that lease
	// arithmetic in Go and Lua is exact.
	MaxLease = 30 * 24 * time.Hour
	// MaxWaitTimeout is the longest WithWaitTimeout accepted (30 days): to
	// wait without bound, do not set one and bound ctx instead, or not at all.
	MaxWaitTimeout = 30 * 24 * time.Hour
	// MaxLinger is the longest WithLinger accepted: every other Client
	// waiting for the lock may wait this long once per turn.
	MaxLinger = 100 * time.Millisecond
	// MinClaimWindow: the Client extends a claim a third of the window after
	// the grant and gives the renewal the rest; below 300ms a loaded machine
	// (GC pause, -race) loses locks handed to it.
	MinClaimWindow = 300 * time.Millisecond
	// MaxClaimWindow: a waiter that is handed the lock but cannot take it up
	// holds the queue up this long; longer defeats the window's purpose.
	MaxClaimWindow = time.Minute
)

// checkRange reports d outside [lo, hi] as an error wrapping ErrInvalidLease
// that names the option.
func checkRange(option string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%w: %s(%v) is out of range: must be between %v and %v", ErrInvalidLease, option, d, lo, hi)
	}
	return nil
}

// Option configures a Client. Options are checked by New.
type Option func(*config)

type config struct {
	watchdogTimeout time.Duration
	keyPrefix       string
	unlockTimeout   time.Duration
	noExpiryPoll    time.Duration
	pubsubOpts      []pubsub.Option
	probe           bool          // see WithProbe
	probeTimeout    time.Duration // see WithProbeTimeout
	linger          time.Duration // see WithLinger
	fifo            bool          // see WithFIFO
	ackReplicas     int           // see WithReplicaAck
	ackTimeout      time.Duration // see WithReplicaAck
	ackSet          bool
	ackRetry        bool          // see WithReplicaAckRetry
	claimWindow     time.Duration // see WithClaimWindow
	logger          *slog.Logger  // see WithLogger
	observer        Observer      // see WithObserver
	functions       bool          // see WithRedisFunctions
}

func defaultConfig() config {
	return config{
		watchdogTimeout: DefaultWatchdogTimeout,
		keyPrefix:       DefaultKeyPrefix,
		unlockTimeout:   DefaultUnlockTimeout,
		noExpiryPoll:    DefaultNoExpiryPoll,
		probe:           true,
		probeTimeout:    DefaultProbeTimeout,
		linger:          DefaultLinger,
		claimWindow:     DefaultClaimWindow,
	}
}

func (c *config) validate() error {
	if err := checkRange("WithWatchdogTimeout", c.watchdogTimeout, MinWatchdogTimeout, MaxWatchdogTimeout); err != nil {
		return err
	}
	if err := checkRange("WithUnlockTimeout", c.unlockTimeout, MinUnlockTimeout, MaxUnlockTimeout); err != nil {
		return err
	}
	if err := checkRange("WithNoExpiryPoll", c.noExpiryPoll, MinNoExpiryPoll, MaxNoExpiryPoll); err != nil {
		return err
	}
	if err := checkRange("WithProbeTimeout", c.probeTimeout, MinProbeTimeout, MaxProbeTimeout); err != nil {
		return err
	}
	if err := checkRange("WithLinger", c.linger, 0, MaxLinger); err != nil {
		return err
	}
	if err := c.validateReplicaAck(); err != nil {
		return err
	}
	if err := checkRange("WithClaimWindow", c.claimWindow, MinClaimWindow, MaxClaimWindow); err != nil {
		return err
	}
	return core.ValidatePrefix(c.keyPrefix, ErrInvalidName)
}

func (c *config) core() core.Config {
	return core.Config{
		WatchdogTimeout: c.watchdogTimeout,
		UnlockTimeout:   c.unlockTimeout,
		NoExpiryPoll:    c.noExpiryPoll,
		KeyPrefix:       c.keyPrefix,
		Linger:          c.linger,

		ReplicaAck:        c.ackReplicas,
		ReplicaAckTimeout: c.ackTimeout,
		ReplicaAckRetry:   c.ackRetry,
		ClaimWindow:       c.claimWindow,
		Logger:            c.logger,
		Observer:          c.coreObserver(),
		Functions:         c.functions,
	}
}

func (c *config) coreObserver() core.Observer {
	if c.observer == nil {
		return nil
	}
	return observer{c.observer}
}

// WithLinger sets how long the last Unlock of a contended lock keeps it for
// the next Lock of the same Client: a worker that locks again within the
// linger takes the lock at once, with no round trip, as a goroutine of the
// same Client waiting at Unlock would (see the package documentation on
// turns). Only a lock that other Clients wait for in Redis is kept (a lock no
// one else wants is released at once, free for anyone), only with the
// watchdog's lease, and only while the Client's turn lasts: at most 8 holds
// (or as many as fit in 2ms, up to 64) per acquisition in Redis, after which
// the lock goes to the next Client in arrival order. A linger that runs out
// unused releases the lock then, and the Client stops lingering on that lock
// until a Lock comes within the linger of a release again.
//
// d is the longest linger. Once the Client has seen how soon its Lock calls
// come back after Unlock on a lock, it lingers 8 times the longest recent gap
// (a maximum that decays over a dozen relocks), at least d/4 and at most d:
// a worker that relocks within 10µs and then stops costs the next Client
// d/4, not d. Lingers under 2ms are timed by a kernel sleep rather than Go's
// timers, which in a process with nothing else to do fire a timer shorter
// than 1ms after about 1.1ms on Linux: a linger runs out within about 0.1ms
// of its length (elsewhere than on Unix, Go's timers time it).
//
// Waiters of other Clients may thus wait up to one linger more per turn.
// The Client's one-permit semaphores (semaphore.NewLock) keep their permit
// the same way. Default DefaultLinger (1ms); 0 never keeps a released lock;
// allowed 0 to MaxLinger (100ms).
func WithLinger(d time.Duration) Option {
	return func(c *config) { c.linger = d }
}

// WithFIFO makes every Mutex of the Client strictly fair, as Client.FairMutex
// makes one: each Lock call queues in Redis under its own owner id, and the
// lock goes to the callers in the order they queued there, across every
// goroutine of every process that uses the lock this way. The goroutines of the
// Client then wait as strangers to each other: no cohort, no local passes, no
// lock kept for the Client's next Lock (WithLinger has no effect on them), so
// every hold costs a hand-off through Redis. Default: off (Client.Mutex
// returns cohorting Mutexes, see the package documentation).
func WithFIFO() Option {
	return func(c *config) { c.fifo = true }
}

// WithWatchdogTimeout sets the lease of holds taken without WithLease. The
// watchdog renews such holds every third of it while they are held, so a
// crashed holder's lock is free again at most this long after its last renewal.
// It also sets how long a waiter that stopped re-checking keeps its place in a
// lock's queue (two timeouts). A holder that cannot renew for the rest of its
// lease (paused, or cut off from Redis: two thirds of the timeout at worst)
// loses its lock. Default DefaultWatchdogTimeout
// (30s); allowed MinWatchdogTimeout (300ms) to MaxWatchdogTimeout (24h): New
// rejects a value outside them with an error matching ErrInvalidLease that
// names the option and the range.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *config) { c.watchdogTimeout = d }
}

// WithClaimWindow sets how long a lock handed to a queued waiter of this
// Client is granted for in Redis before the Client takes it up: a Mutex, or
// an RWMutex's write lock granted to a writer or read lock granted to readers
// admitted together. A release hands the lock to the head of the queue
// directly; the grant runs for the claim window (or the lease, when
// shorter), and the Client that receives it extends it to the full lease
// with an early renewal, batched with the others due then, a third of the
// window later (a hold released before then costs nothing more). A waiter
// that is handed the lock but cannot take it up (its process is paused, or
// stuck with its connection open) thus holds the queue up for the claim
// window, not a lease; the waiter queued behind it is told to re-check when
// the window lapses. A hold whose extension does not land in time ends with
// ErrLeaseLost, as a lease that runs out does. WithLease holds handed the
// lock confirm it with one round trip on receipt, which sets their full
// lease. Default DefaultClaimWindow (3s); allowed MinClaimWindow (300ms) to
// MaxClaimWindow (1m).
func WithClaimWindow(d time.Duration) Option {
	return func(c *config) { c.claimWindow = d }
}

// WithKeyPrefix namespaces every key and pub/sub channel of the Client:
// a lock named n lives at "<prefix>:{n}", and every key and channel of the
// Client starts with "<prefix>:{", so the Redis ACL patterns "~<prefix>:{*"
// and "&<prefix>:{*" confine a user to them (see docs/operations.md).
// Pub/sub channels ignore the database number, so Clients sharing a server
// but not locks need distinct prefixes. Default DefaultKeyPrefix ("rlock").
//
// New rejects, with an error matching ErrInvalidName, a prefix that is empty,
// contains a brace (it would move the hash tag), a control character or a
// glob character of ACL patterns (* ? [ ] \), is not valid UTF-8, or is
// longer than MaxNameLength: no ACL pattern could confine a user to such a
// prefix. A ':' is allowed: "a" and "a:b" stay apart, as the '{' that
// follows the prefix in every key separates them.
func WithKeyPrefix(p string) Option {
	return func(c *config) { c.keyPrefix = p }
}

// WithUnlockTimeout bounds how long Unlock keeps retrying a release whose
// outcome is unknown (connection errors). Unlock does not stop when the lock
// context is cancelled, which it is when the lease is lost; this bound applies
// instead. It also bounds each release of a hold whose lock context the
// program dropped (see WithLogger). Default 5s; allowed MinUnlockTimeout
// (10ms) to MaxUnlockTimeout (1m).
func WithUnlockTimeout(d time.Duration) Option {
	return func(c *config) { c.unlockTimeout = d }
}

// WithNoExpiryPoll sets how often a waiter re-checks a lock whose key has no
// expiry (set by hand, outside this library), where there is no lease to wait
// out. Default 1s; allowed MinNoExpiryPoll (10ms) to MaxNoExpiryPoll (1h).
func WithNoExpiryPoll(d time.Duration) Option {
	return func(c *config) { c.noExpiryPoll = d }
}

// WithLogger sets where the Client logs what a caller should hear of but
// cannot be told through an error: today, a hold whose lock context the
// program dropped without Unlock, which the Client released (see the package
// documentation, Lock context). It logs at level Warn. Default: nil, which
// logs to slog.Default() as it is when the line is written (so
// slog.SetDefault applies).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithRedisFunctions sets whether the lock scripts (the acquisitions,
// releases and clean-ups of Mutexes, RWMutexes and semaphores, and a
// QuorumMutex's votes) run as Redis function libraries, one per lock kind,
// instead of by EVALSHA. On, the Client loads a library (FUNCTION LOAD) the
// first time a call finds it missing on a server, and calls its scripts with
// FCALL: Redis then makes the scripts' shared Lua once, not at every call,
// which cut Redis's time per script call by a fifth (Mutex) to a quarter
// (RWMutex) where Redis was the bottleneck (docs/benchmarks.md). Where
// functions cannot run (Redis before 7.0, a user who may not FCALL or
// FUNCTION LOAD) the Client falls back to EVALSHA by itself. Default: off.
//
// Turn it on only where every Redis user allowed FUNCTION LOAD (any user
// with +@scripting or +@all, whatever its keys) is trusted with the locks:
// Redis finds a function by its name, which anyone may load or replace, and
// runs it with the caller's rights, so such a user could take, free or hand
// out every lock of Clients that call it. A script sent by EVALSHA is found
// by the hash of its code and cannot be substituted. The libraries are named
// relock_<kind>_<hash of the code> and, as every Redis function, are kept in
// the server's RDB and AOF files and replicated; those of versions no longer
// run stay until deleted (FUNCTION DELETE, see docs/operations.md).
// Renewals, sent in batches, the read-only Inspect scripts, and with
// WithReplicaAck the acquisitions (sent with WAIT on one connection) always
// run by EVALSHA.
func WithRedisFunctions(on bool) Option {
	return func(c *config) { c.functions = on }
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
	waitTimeout time.Duration // 0: until ctx is done (or, with tryOnce, no wait)
	leaseSet    bool
	waitSet     bool
	// tryOnce: WithWaitTimeout(0) was given, which means exactly one attempt,
	// as TryLock. waitSet is also true with waitTimeout 0, so that a caller
	// that does not look at tryOnce still waits no longer than the attempt.
	tryOnce bool
	// member: a MultiLock takes the lock as one of its members; the
	// MultiLock's lock context, not the member's, is watched for a drop.
	member bool
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
	if lc.leaseSet {
		if err := checkRange("WithLease", lc.lease, MinLease, MaxLease); err != nil {
			return lc, err
		}
	}
	if lc.waitSet {
		if err := checkRange("WithWaitTimeout", lc.waitTimeout, 0, MaxWaitTimeout); err != nil {
			return lc, err
		}
		lc.tryOnce = lc.waitTimeout == 0
	}
	return lc, nil
}

// WithLease gives the hold a fixed lease: no watchdog renews it, and its lock
// context is cancelled with ErrLeaseLost when the lease ends (slightly before
// Redis expires the key, to allow for clock drift). On re-entry it re-sets the
// hold's lease. Default: the watchdog keeps the hold until Unlock. Allowed
// MinLease (1ms) to MaxLease (30 days).
//
// A hold with a fixed lease ends by itself, so its lock context may be
// dropped without Unlock: the hold is then left to its lease, not released
// when a garbage collection finds the context unreachable (as a watchdog
// hold is, see Lock context in the package documentation), and the Client
// forgets it when the lease ends. Taking a lock with WithLease and letting it
// expire is thus a way to do something at most once per lease across
// processes:
//
//	if _, err := m.TryLock(ctx, rlock.WithLease(10*time.Second)); err == nil {
//		// ... runs at most once in 10s, whoever runs it ...
//	}
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.lease, c.leaseSet = d, true }
}

// WithWaitTimeout bounds how long Lock waits for the lock, without bounding the
// hold: the lock context ends with the hold only, not with this timeout (nor
// with Lock's ctx).
// It starts once Lock has had an answer from Redis (ctx alone bounds that
// first round trip), so however short, it ends a Lock only after Redis said
// another owner holds the lock: when it runs out, Lock fails with an error
// matching ErrLocked and context.DeadlineExceeded (ErrUnavailable instead
// when Redis could no longer be reached). Default: wait until ctx is done.
//
// WithWaitTimeout(0) means one attempt and no wait, as TryLock (as in
// Redisson, where a wait time of 0 tries once): when another owner holds the
// lock the error matches ErrLocked. Negative values are rejected,
// and so are values above MaxWaitTimeout (30 days).
func WithWaitTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) { c.waitTimeout, c.waitSet = d, true }
}

// asMember marks a MultiLock's member acquisition (see lockConfig.member).
func asMember() LockOption {
	return func(c *lockConfig) { c.member = true }
}

// lockCall reads the options of a Lock or TryLock call and makes the checks
// every lock kind makes first, in this order: the options, the lock itself
// (unusable: its invalid name, a closed Client...), and ctx. The wait it
// returns is false when WithWaitTimeout(0) asks for one attempt.
func lockCall(ctx context.Context, wait bool, opts []LockOption, unusable error) (lockConfig, bool, error) {
	lc, err := newLockConfig(opts)
	if err != nil {
		return lc, false, err
	}
	if unusable != nil {
		return lc, false, unusable
	}
	if ctx == nil {
		return lc, false, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	return lc, wait && !lc.tryOnce, nil
}
