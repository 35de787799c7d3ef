package semaphore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/relockio/relock/rlock"
)

// Lock is a non-reentrant lock: a Semaphore with a limit of one. Unlike
// rlock.Mutex, a holder that locks again waits for itself (TryLock fails),
// and any goroutine holding the lock context may unlock it.
type Lock struct {
	s       *Semaphore
	limited atomic.Bool
}

// NewLock returns the lock called name, a semaphore with limit one, which it
// sets on first use. It fails (on use) with ErrExceedsLimit if a semaphore of
// that name exists with another limit.
func NewLock(c *rlock.Client, name string) *Lock {
	return &Lock{s: New(c, name)}
}

// Semaphore returns the semaphore behind the lock.
func (l *Lock) Semaphore() *Semaphore { return l.s }

func (l *Lock) ensureLimit(ctx context.Context) error {
	if l.limited.Load() {
		return nil
	}
	if _, err := l.s.TrySetLimit(ctx, 1); err != nil {
		return err
	}
	limit, err := l.s.Limit(ctx)
	if err != nil {
		return err
	}
	if limit != 1 {
		return fmt.Errorf("%w: %q is a semaphore with limit %d, not a lock", ErrExceedsLimit, l.s.name, limit)
	}
	l.limited.Store(true)
	return nil
}

// Lock blocks until it holds the lock (see Semaphore.Acquire) and returns the
// lock context to pass to Unlock.
func (l *Lock) Lock(ctx context.Context, opts ...AcquireOption) (context.Context, error) {
	if err := l.ensureLimit(ctx); err != nil {
		return nil, err
	}
	return l.s.Acquire(ctx, 1, opts...)
}

// TryLock makes one attempt; it fails with ErrNoPermits when the lock is held.
func (l *Lock) TryLock(ctx context.Context, opts ...AcquireOption) (context.Context, error) {
	if err := l.ensureLimit(ctx); err != nil {
		return nil, err
	}
	return l.s.TryAcquire(ctx, 1, opts...)
}

// Unlock releases the lock held by lockCtx (see Semaphore.Release).
func (l *Lock) Unlock(lockCtx context.Context) error {
	return l.s.Release(lockCtx)
}
