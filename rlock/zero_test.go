package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/relockio/relock/rlock"
)

// noPanic runs f, turning a panic into a test error.
func noPanic(t *testing.T, what string, f func() error) error {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", what, r)
			}
		}()
		err = f()
	}()
	return err
}

// The zero values of the exported types (a struct field not yet set, say)
// fail with an error naming what is wrong, never a panic.
func TestZeroValuesFailCleanly(t *testing.T) {
	ctx := context.Background()
	second := func(_ any, err error) error { return err }
	for what, f := range map[string]func() error{
		"Mutex{}.Lock":        func() error { var m rlock.Mutex; return second(m.Lock(ctx)) },
		"Mutex{}.TryLock":     func() error { var m rlock.Mutex; return second(m.TryLock(ctx)) },
		"Mutex{}.HoldCount":   func() error { var m rlock.Mutex; return second(m.HoldCount(ctx)) },
		"Mutex{}.IsLocked":    func() error { var m rlock.Mutex; return second(m.IsLocked(ctx)) },
		"Mutex{}.Inspect":     func() error { var m rlock.Mutex; return second(m.Inspect(ctx)) },
		"RWMutex{}.Lock":      func() error { var m rlock.RWMutex; return second(m.Lock(ctx)) },
		"RWMutex{}.RLock":     func() error { var m rlock.RWMutex; return second(m.RLock(ctx)) },
		"MultiLock{}.Lock":    func() error { var m rlock.MultiLock; return second(m.Lock(ctx)) },
		"QuorumMutex{}.Lock":  func() error { var m rlock.QuorumMutex; return second(m.Lock(ctx)) },
		"Client{}.Mutex.Lock": func() error { var c rlock.Client; return second(c.Mutex("x").Lock(ctx)) },
		"Client{}.RWMutex.RLock": func() error {
			var c rlock.Client
			return second(c.RWMutex("x").RLock(ctx))
		},
		"Client{}.MultiLock.Lock": func() error { var c rlock.Client; return second(c.MultiLock("x").Lock(ctx)) },
		"Client{}.List": func() error {
			var c rlock.Client
			_, _, err := c.List(ctx, "", "", 0)
			return err
		},
	} {
		if err := noPanic(t, what, f); !errors.Is(err, rlock.ErrInvalidOption) {
			t.Errorf("%s: %v; want an error matching ErrInvalidOption", what, err)
		}
	}
	var c rlock.Client
	if err := noPanic(t, "Client{}.Close", c.Close); err != nil {
		t.Errorf("Client{}.Close: %v", err)
	}
	noPanic(t, "Client{} accessors", func() error {
		_, _, _ = c.ID(), c.Stats(), c.PubSubStats()
		return nil
	})
}

// List refuses a nil context and a closed Client, as every other method does.
func TestListNilContextAndClosed(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	var nilCtx context.Context
	if err := noPanic(t, "List(nil)", func() error { _, _, err := c.List(nilCtx, "", "", 0); return err }); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Errorf("List(nil ctx): %v; want ErrInvalidOption", err)
	}
	_ = c.Close()
	if _, _, err := c.List(e.ctx, "", "", 0); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("List after Close: %v; want ErrClosed", err)
	}
}

// Inspections retry the connection a Redis restart broke, as IsLocked does,
// instead of reporting its first failure.
func TestInspectAfterRestart(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	m, rw := c.Mutex("restart"), c.RWMutex("restart-rw")
	for i := range 3 {
		for what, do := range map[string]func() error{
			"Mutex.Inspect":   func() error { _, err := m.Inspect(e.ctx); return err },
			"RWMutex.Inspect": func() error { _, err := rw.Inspect(e.ctx); return err },
		} {
			if err := e.srv.Restart(e.ctx); err != nil {
				t.Fatal(err)
			}
			if err := do(); err != nil {
				t.Errorf("%s right after restart %d: %v", what, i+1, fmt.Sprint(err))
			}
		}
	}
}

// callRecorder records the calls an Observer is told of.
type callRecorder struct {
	mu       sync.Mutex
	acquired []string
	released []string
}

func (o *callRecorder) Acquired(_ context.Context, e *rlock.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acquired = append(o.acquired, e.Op+" "+e.Name)
}

func (o *callRecorder) Released(_ context.Context, e *rlock.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.released = append(o.released, e.Op+" "+e.Name)
}

func (o *callRecorder) HoldEnded(*rlock.Event) {}

// Calls refused for an invalid name are told to the Observer and counted in
// Stats, as calls refused for an invalid option are.
func TestObserverToldOfInvalidNames(t *testing.T) {
	e := ftNewEnv(t)
	o := &callRecorder{}
	c := e.client(rlock.WithObserver(o))
	_, _ = c.Mutex("").Lock(e.ctx)
	_, _ = c.Mutex("a{b}").TryLock(e.ctx)
	_, _ = c.RWMutex("").RLock(e.ctx)
	_ = c.Mutex("").Unlock(e.ctx)
	_ = c.RWMutex("").RUnlock(e.ctx)
	_, _ = c.Mutex("ok").Lock(e.ctx, rlock.WithLease(-1))
	if len(o.acquired) != 4 || len(o.released) != 2 {
		t.Fatalf("the Observer was told of acquisitions %q and releases %q; want 4 and 2", o.acquired, o.released)
	}
	if n := c.Stats().OtherErrors; n != 4 {
		t.Fatalf("Stats.OtherErrors = %d; want 4", n)
	}
}
