package semaphore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/rlock"
)

// MaxPermits bounds limits and permit counts, far above any real pool, so
// that arithmetic in Redis stays exact.
const MaxPermits = 1 << 40

// Semaphore is a counting semaphore named by a string. Get one with New; it
// is cheap, and any number may exist.
type Semaphore struct {
	c     *core.Client
	name  string
	err   error  // invalid name, client or option, reported by every method
	limit string // the limit of WithLimit, established when missing; "" for none
	exact bool   // a Lock's: the limit must be the configured one
	keys  keys
	grant string      // this Client's grant channel (see core.GrantChannel)
	turns *core.Turns // the Client's turns, for a limit configured as 1 (see turns.go)
}

// Option configures a Semaphore.
type Option func(*config)

type config struct {
	limit    int64
	limitSet bool
}

// WithLimit gives the semaphore a limit that it establishes by itself in
// Redis whenever none is set there: on first use, and again after Redis lost
// it (a restart without persistence, or the semaphore's keys expired while it
// was idle). A semaphore configured so leaves nothing behind in Redis once it
// is idle (see the package documentation).
//
// The limit in Redis wins: WithLimit never changes an existing limit. When
// processes configure different limits, the first to use the semaphore (after
// each time the limit went missing) sets it, and the others use it; a limit set
// by TrySetLimit or SetLimit overrides them all, for good. So a changed
// WithLimit rolled out to every process takes effect by itself once the
// semaphore has been idle long enough for its state to expire, or Redis lost
// it; to apply it at once, call SetLimit (which makes the limit permanent).
func WithLimit(limit int64) Option {
	return func(c *config) { c.limit, c.limitSet = limit, true }
}

// New returns the semaphore called name on c's Redis. Its limit must be set
// before permits can be acquired: by the WithLimit option, or by someone
// calling TrySetLimit or SetLimit. An invalid name, option or a nil client is
// reported by every method.
func New(c *rlock.Client, name string, opts ...Option) *Semaphore {
	cc := c.Core()
	if cc == nil {
		return &Semaphore{name: name, err: fmt.Errorf("%w: nil rlock.Client", ErrInvalidClient)}
	}
	s := &Semaphore{c: cc, name: name, err: core.ValidateName(name, ErrInvalidName), keys: newKeys(cc.Cfg.KeyPrefix, name)}
	s.grant = core.GrantChannel(s.keys.state, cc.ID)
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.limitSet {
		if err := validLimit(cfg.limit); err != nil && s.err == nil {
			s.err = err
		}
		s.limit = strconv.FormatInt(cfg.limit, 10)
		if cfg.limit == 1 && s.err == nil {
			s.turns = cc.Turns(core.PermitTurns)
		}
	}
	return s
}

// Name returns the name the Semaphore was created with.
func (s *Semaphore) Name() string { return s.name }

// keys names everything a semaphore owns in Redis; all share the hash tag {name}.
type keys struct {
	state, permits, counts, queue, waiters string // state is the key base too
	// grantPrefix starts the grant channel of every Client (see
	// core.GrantChannel): a release hands permits to a waiter there.
	grantPrefix string
}

const (
	permitsSuffix = ":permits"
	countsSuffix  = ":counts"
)

func newKeys(prefix, name string) keys {
	base := core.Base(prefix, name) + ":sem"
	return keys{
		state:       base,
		permits:     base + permitsSuffix,
		counts:      base + countsSuffix,
		queue:       base + ":queue",
		waiters:     base + ":waiters",
		grantPrefix: core.GrantChannelPrefix(base),
	}
}

func (k keys) with(extra string) []string {
	return []string{k.state, k.permits, k.counts, k.queue, k.waiters, extra}
}

func (k keys) common() []string { return []string{k.state, k.permits, k.counts, k.queue, k.waiters} }

func (k keys) latch(requestID string) string { return k.state + ":latch:" + requestID }

func (k keys) tombstone(id string) string { return k.state + ":gone:" + id }

func (s *Semaphore) usable() error {
	if s.err != nil {
		return s.err
	}
	if s.c == nil {
		return fmt.Errorf("%w: a zero Semaphore: make it with New", ErrInvalidOption)
	}
	if s.c.IsClosed() {
		return ErrClosed
	}
	return nil
}

// checkContext refuses a nil context, which would otherwise reach rueidis and
// panic there.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	return nil
}

func validLimit(limit int64) error {
	if limit < 0 || limit > MaxPermits {
		return fmt.Errorf("%w: limit must be between 0 and %d, got %d", ErrInvalidCount, int64(MaxPermits), limit)
	}
	return nil
}

// TrySetLimit sets the limit if none is set yet, and reports whether it did.
// Use it at start-up in every process: the first one wins. Over an existing
// limit it returns false and a nil error whatever limit it was given, so it
// cannot apply a changed configuration: SetLimit does. Either way the limit
// is then permanent in Redis: the semaphore's state no longer expires when
// idle, as it does with a limit established by WithLimit, and it is not
// re-established after a restart without persistence (Acquire then fails
// with ErrNoLimit until it is set again); prefer WithLimit.
func (s *Semaphore) TrySetLimit(ctx context.Context, limit int64) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	if err := checkContext(ctx); err != nil {
		return false, err
	}
	if err := validLimit(limit); err != nil {
		return false, err
	}
	st, err := s.limitScript(ctx, "init", limit)
	return st.changed, s.wrap("set limit", err)
}

// SetLimit changes the limit at run time. Raising it hands the new permits to
// the waiters at the head of the queue that now fit; lowering it below the
// permits held lets the holders finish, new acquisitions wait until enough
// permits are released, and waiters asking for more than the new limit fail
// with ErrExceedsLimit. The limit is then permanent in Redis, as with
// TrySetLimit, and overrides WithLimit.
func (s *Semaphore) SetLimit(ctx context.Context, limit int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validLimit(limit); err != nil {
		return err
	}
	_, err := s.limitScript(ctx, "set", limit)
	return s.wrap("set limit", err)
}

// Limit returns the limit, or an error matching ErrNoLimit if none is set
// (with WithLimit, one is established if missing).
func (s *Semaphore) Limit(ctx context.Context) (int64, error) {
	st, err := s.State(ctx)
	return st.Limit, err
}

// Available returns the permits that could be acquired now (0 while the limit
// is lowered below the permits held), or an error matching ErrNoLimit.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	st, err := s.State(ctx)
	return max(st.Limit-st.Held, 0), err
}

// State is a snapshot of a semaphore in Redis, after expired permits were
// returned to the pool.
type State struct {
	Limit  int64 // the limit
	Held   int64 // permits held by unexpired leases
	Queued int64 // waiters queued, in all processes
}

// State returns the semaphore's limit, held permits and queue length, or an
// error matching ErrNoLimit if no limit is set.
func (s *Semaphore) State(ctx context.Context) (State, error) {
	if err := s.usable(); err != nil {
		return State{}, err
	}
	if err := checkContext(ctx); err != nil {
		return State{}, err
	}
	var st limitReply
	err := s.c.Inspect(ctx, func(ctx context.Context) (err error) {
		st, err = s.limitScript(ctx, "get", 0)
		return err
	})
	if err != nil {
		return State{}, s.wrap("state", err)
	}
	if st.Limit < 0 {
		return State{}, fmt.Errorf("%w: %q", ErrNoLimit, s.name)
	}
	return st.State, nil
}

// wrap adds the operation and name to an error, unless it is one of this
// package's, which say so already. The package prefix of an error of package
// rlock (a closed Client, say) gives way to this package's: one per message.
func (s *Semaphore) wrap(op string, err error) error {
	if err == nil || strings.HasPrefix(err.Error(), "semaphore: ") {
		return core.Refused(err)
	}
	return core.Refused(fmt.Errorf("semaphore: %s %q: %w", op, s.name, core.Inner(err)))
}

// String describes the Semaphore for logs.
func (s *Semaphore) String() string {
	return "semaphore.Semaphore(" + strconv.Quote(s.name) + ")"
}
