package semaphore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/rlock"
)

// MaxPermits bounds limits and permit counts, far above any real pool, so
// that arithmetic in Redis stays exact.
const MaxPermits = 1 << 40

// Semaphore is a counting semaphore named by a string. Get one with New; it
// is cheap, and any number may exist.
type Semaphore struct {
	c    *core.Client
	name string
	err  error // invalid name or client, reported by every method
	keys keys
}

// New returns the semaphore called name on c's Redis. Its limit must be set
// (TrySetLimit or SetLimit) by someone before permits can be acquired. An
// invalid name or a nil client is reported by every method.
func New(c *rlock.Client, name string) *Semaphore {
	cc, ok := core.Of(c)
	if !ok {
		return &Semaphore{name: name, err: fmt.Errorf("%w: nil rlock.Client", ErrInvalidClient)}
	}
	return &Semaphore{c: cc, name: name, err: core.ValidateName(name, ErrInvalidName), keys: newKeys(cc.Cfg.KeyPrefix, name)}
}

// Name returns the name the Semaphore was created with.
func (s *Semaphore) Name() string { return s.name }

// keys names everything a semaphore owns in Redis; all share the hash tag {name}.
type keys struct {
	state, permits, counts, queue, waiters, wants string
	channel                                       string
}

func newKeys(prefix, name string) keys {
	base := core.Base(prefix, name) + ":sem"
	return keys{
		state:   base,
		permits: base + ":permits",
		counts:  base + ":counts",
		queue:   base + ":queue",
		waiters: base + ":waiters",
		wants:   base + ":wants",
		channel: base + ":wake",
	}
}

func (k keys) common() []string {
	return []string{k.state, k.permits, k.counts, k.queue, k.waiters, k.wants}
}

func (k keys) with(extra string) []string { return append(k.common(), extra) }

func (k keys) latch(requestID string) string { return k.state + ":latch:" + requestID }

func (k keys) tombstone(id string) string { return k.state + ":gone:" + id }

func (s *Semaphore) usable() error {
	if s.err != nil {
		return s.err
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
// Use it at start-up in every process: the first one wins.
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

// SetLimit changes the limit at run time. Raising it wakes waiters that now
// fit; lowering it below the permits held lets the holders finish, and new
// acquisitions wait until enough permits are released.
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

// Limit returns the limit, or an error matching ErrNoLimit if none is set.
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
	st, err := s.limitScript(ctx, "get", 0)
	if err != nil {
		return State{}, s.wrap("state", err)
	}
	if st.Limit < 0 {
		return State{}, fmt.Errorf("%w: %q", ErrNoLimit, s.name)
	}
	return st.State, nil
}

func (s *Semaphore) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("semaphore: %s %q: %w", op, s.name, err)
}

// String describes the Semaphore for logs.
func (s *Semaphore) String() string {
	return "semaphore.Semaphore(" + strconv.Quote(s.name) + ")"
}
