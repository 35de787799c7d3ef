package semaphore

import (
	"context"
	"fmt"

	"github.com/relockio/relock/rlock"
)

// Lock is a non-reentrant lock: a Semaphore with a limit of one. Unlike
// rlock.Mutex, a holder that locks again waits for itself (TryLock fails),
// and any goroutine holding the lock context may unlock it.
type Lock struct {
	s *Semaphore
}

// NewLock returns the lock called name, a semaphore with limit one, which
// each attempt sets in Redis whenever it is missing (as WithLimit(1) does, so
// the lock survives a Redis restart and leaves nothing behind when idle). It
// fails (on use) with ErrExceedsLimit if a semaphore of that name exists with
// another limit.
func NewLock(c *rlock.Client, name string) *Lock {
	s := New(c, name, WithLimit(1))
	s.exact = true
	return &Lock{s: s}
}

// Semaphore returns the semaphore behind the lock.
func (l *Lock) Semaphore() *Semaphore { return l.s }

// Lock blocks until it holds the lock (see Semaphore.Acquire) and returns the
// lock context to pass to Unlock.
func (l *Lock) Lock(ctx context.Context, opts ...AcquireOption) (context.Context, error) {
	if l.s == nil {
		return nil, errZeroLock
	}
	return l.s.Acquire(ctx, 1, opts...)
}

// errZeroLock is what a zero Lock's methods return.
var errZeroLock = fmt.Errorf("%w: a zero Lock: make it with NewLock", ErrInvalidOption)

// TryLock makes one attempt; it fails with ErrNoPermits when the lock is held.
func (l *Lock) TryLock(ctx context.Context, opts ...AcquireOption) (context.Context, error) {
	if l.s == nil {
		return nil, errZeroLock
	}
	return l.s.TryAcquire(ctx, 1, opts...)
}

// Unlock releases the lock held by lockCtx (see Semaphore.Release).
func (l *Lock) Unlock(lockCtx context.Context) error {
	if l.s == nil {
		return errZeroLock
	}
	return l.s.Release(lockCtx)
}
