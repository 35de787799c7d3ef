package semaphore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/relockio/relock/semaphore"
)

// The zero values of Semaphore and Lock fail with an error naming what is
// wrong, and a nil context is refused by Inspect as by every other method:
// never a panic.
func TestZeroValuesAndNilContext(t *testing.T) {
	e := newEnv(t)
	s := semaphore.New(e.client(), "zero", semaphore.WithLimit(2))
	ctx := context.Background()
	var nilCtx context.Context
	second := func(_ any, err error) error { return err }
	for what, f := range map[string]func() error{
		"Semaphore{}.Acquire":    func() error { var s semaphore.Semaphore; return second(s.Acquire(ctx, 1)) },
		"Semaphore{}.TryAcquire": func() error { var s semaphore.Semaphore; return second(s.TryAcquire(ctx, 1)) },
		"Semaphore{}.State":      func() error { var s semaphore.Semaphore; return second(s.State(ctx)) },
		"Semaphore{}.Inspect":    func() error { var s semaphore.Semaphore; return second(s.Inspect(ctx)) },
		"Lock{}.Lock":            func() error { var l semaphore.Lock; return second(l.Lock(ctx)) },
		"Lock{}.TryLock":         func() error { var l semaphore.Lock; return second(l.TryLock(ctx)) },
		"Lock{}.Unlock":          func() error { var l semaphore.Lock; return l.Unlock(ctx) },
		"Inspect(nil)":           func() error { return second(s.Inspect(nilCtx)) },
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", what, r)
				}
			}()
			err = f()
		}()
		if !errors.Is(err, semaphore.ErrInvalidOption) {
			t.Errorf("%s: %v; want an error matching ErrInvalidOption", what, err)
		}
	}
	if keys := e.keys(); len(keys) > 0 {
		t.Errorf("keys left: %q", keys)
	}
}
