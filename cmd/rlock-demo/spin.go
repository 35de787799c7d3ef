package main

import (
	"context"
	"time"

	"github.com/relockio/relock/internal/measure"
)

// spinLease is the spin lock's lease: far longer than any hold in the demo.
const spinLease = 30 * time.Second

// spinLock adapts the SET NX spin lock (measure.SpinLocker) to locker, on one
// key. It is what rlock.Mutex is compared against.
type spinLock struct {
	l   *measure.SpinLocker
	key string
}

func (s *spinLock) Lock(ctx context.Context) (func() error, error) {
	unlock, err := s.l.Lock(ctx, s.key)
	if err != nil {
		return nil, err
	}
	// The release does not take the caller's context: it must go through
	// even when the run that took the lock is over.
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return unlock(ctx)
	}, nil
}

// Close does nothing: a spin lock keeps no state outside Redis.
func (s *spinLock) Close() error { return nil }
