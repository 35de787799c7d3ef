package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// onePrefix fails the test unless msg names a package of this module once,
// at its start: errors read "rlock: ...", never "rlock: x: rlock: y".
func onePrefix(t *testing.T, what, msg string) {
	t.Helper()
	n := strings.Count(msg, "rlock: ") + strings.Count(msg, "semaphore: ") + strings.Count(msg, "pubsub: ")
	if n != 1 || !strings.HasPrefix(msg, "rlock: ") {
		t.Errorf("%s: %q names a package %d times, want once, at the start", what, msg, n)
	}
}

// TestErrorMessages: errors and lock-context causes read with one package
// prefix, say what failed, and match the sentinels documented for them.
func TestErrorMessages(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	m := c.Mutex("msg")

	lockCtx, err := m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.TryLock(e.ctx)
	onePrefix(t, "TryLock of a held lock", err.Error())
	if !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock of a held lock: %v, want ErrLocked", err)
	}
	_, err = c.MultiLock("msg", "other").TryLock(e.ctx)
	onePrefix(t, "MultiLock.TryLock with a member held", err.Error())
	if !errors.Is(err, rlock.ErrLocked) || !strings.Contains(err.Error(), `member "msg"`) {
		t.Errorf("MultiLock.TryLock with a member held: %v, want ErrLocked naming the member", err)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	err = m.Unlock(lockCtx)
	onePrefix(t, "second Unlock", err.Error())
	if want := `rlock: not held: "msg" was already unlocked by this context`; err.Error() != want {
		t.Errorf("second Unlock: %q, want %q", err, want)
	}

	// A lease lost: the cause, then Unlock's error, which names the loss
	// once.
	short, err := m.Lock(e.ctx, rlock.WithLease(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	if cause := context.Cause(short); cause.Error() != "rlock: lease lost" || !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("cause of a lease that ran out = %q, want rlock: lease lost", cause)
	}
	err = m.Unlock(short)
	if want := `rlock: not held: "msg": lease lost`; err == nil || err.Error() != want {
		t.Errorf("Unlock after the lease ran out: %v, want %q", err, want)
	}
	if !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Errorf("Unlock after the lease ran out: %v, want ErrNotHeld and ErrLeaseLost", err)
	}

	// Close ends a hold with a cause that says both.
	c2 := e.client()
	held, err := c2.Mutex("closed").Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	cause := context.Cause(held)
	if cause.Error() != "rlock: lease lost: client closed" || !errors.Is(cause, rlock.ErrLeaseLost) || !errors.Is(cause, rlock.ErrClosed) {
		t.Errorf("cause after Close = %q, want rlock: lease lost: client closed, matching ErrLeaseLost and ErrClosed", cause)
	}
}

// TestInvalidNameMessage: a long invalid name is quoted in part, with its
// length, not whole (600 control bytes quoted whole made a 2.4KB message).
func TestInvalidNameMessage(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	name := strings.Repeat("\x01", 600)
	for what, err := range map[string]error{
		"Mutex.Lock":       func() error { _, err := c.Mutex(name).Lock(e.ctx); return err }(),
		"RWMutex.RLock":    func() error { _, err := c.RWMutex(name).RLock(e.ctx); return err }(),
		"MultiLock.Lock":   func() error { _, err := c.MultiLock("ok", name).Lock(e.ctx); return err }(),
		"FairMutex.Unlock": c.FairMutex(name).Unlock(e.ctx),
	} {
		if !errors.Is(err, rlock.ErrInvalidName) {
			t.Errorf("%s with a 600-byte invalid name: %v, want ErrInvalidName", what, err)
			continue
		}
		msg := err.Error()
		onePrefix(t, what, msg)
		if len(msg) > 400 || !strings.Contains(msg, `\x01"... (600 bytes) contains a control character`) {
			t.Errorf("%s with a 600-byte invalid name: %d-byte message %q, want the name truncated", what, len(msg), msg)
		}
	}
}
