package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// onePrefix fails the test unless msg names a package of this module once,
// at its start, and that package is semaphore.
func onePrefix(t *testing.T, what, msg string) {
	t.Helper()
	n := strings.Count(msg, "rlock: ") + strings.Count(msg, "semaphore: ") + strings.Count(msg, "pubsub: ")
	if n != 1 || !strings.HasPrefix(msg, "semaphore: ") {
		t.Errorf("%s: %q names a package %d times, want once: semaphore, at the start", what, msg, n)
	}
}

// TestErrorMessages: errors and permit-context causes read with the
// semaphore's prefix once, and match the sentinels documented for them: a
// lease lost reads "semaphore: lease lost" and matches both
// semaphore.ErrLeaseLost and rlock.ErrLeaseLost.
func TestErrorMessages(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	s := semaphore.New(c, "x", semaphore.WithLimit(4))

	for what, acquire := range map[string]func() error{
		"Acquire":    func() error { _, err := s.Acquire(e.ctx, 5); return err },
		"TryAcquire": func() error { _, err := s.TryAcquire(e.ctx, 5); return err },
	} {
		err := acquire()
		if want := `semaphore: request exceeds the limit: "x": asked for 5, limit is 4`; err == nil || err.Error() != want {
			t.Errorf("%s(5) with a limit of 4: %v, want %q", what, err, want)
		}
		if !errors.Is(err, semaphore.ErrExceedsLimit) {
			t.Errorf("%s(5) with a limit of 4: %v, want ErrExceedsLimit", what, err)
		}
	}

	p, err := s.Acquire(e.ctx, 1, semaphore.WithLease(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	cause := context.Cause(p)
	if cause.Error() != "semaphore: lease lost" {
		t.Errorf("cause of a lease that ran out = %q, want semaphore: lease lost", cause)
	}
	if !errors.Is(cause, semaphore.ErrLeaseLost) || !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("cause of a lease that ran out = %v, want it to match semaphore.ErrLeaseLost and rlock.ErrLeaseLost", cause)
	}
	err = s.Release(p)
	if want := `semaphore: permit not held: "x": lease lost`; err == nil || err.Error() != want {
		t.Errorf("Release after the lease ran out: %v, want %q", err, want)
	}
	if !errors.Is(err, semaphore.ErrNotHeld) || !errors.Is(err, semaphore.ErrLeaseLost) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Errorf("Release after the lease ran out: %v, want ErrNotHeld and both ErrLeaseLost", err)
	}

	// A one-permit lock reads the same.
	l := semaphore.NewLock(c, "l")
	lc, err := l.Lock(e.ctx, semaphore.WithLease(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-lc.Done()
	if cause := context.Cause(lc); cause.Error() != "semaphore: lease lost" || !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("lock's cause of a lease that ran out = %q, want semaphore: lease lost matching rlock.ErrLeaseLost", cause)
	}

	// Close ends permits with a cause that says both.
	c2 := e.client()
	held, err := semaphore.New(c2, "x").Acquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	cause = context.Cause(held)
	if cause.Error() != "semaphore: lease lost: client closed" {
		t.Errorf("cause after Close = %q, want semaphore: lease lost: client closed", cause)
	}
	for _, target := range []error{semaphore.ErrLeaseLost, rlock.ErrLeaseLost, semaphore.ErrClosed} {
		if !errors.Is(cause, target) {
			t.Errorf("cause after Close = %v, want it to match %v", cause, target)
		}
	}
	_, err = semaphore.New(c2, "x").Acquire(e.ctx, 1)
	if !errors.Is(err, semaphore.ErrClosed) {
		t.Errorf("Acquire on a closed Client: %v, want ErrClosed", err)
	}
}

// TestInvalidNameMessage: a long invalid name is quoted in part, with its
// length, not whole.
func TestInvalidNameMessage(t *testing.T) {
	e := newEnv(t)
	s := semaphore.New(e.client(), strings.Repeat("\x01", 600), semaphore.WithLimit(1))
	_, err := s.Acquire(e.ctx, 1)
	if !errors.Is(err, semaphore.ErrInvalidName) {
		t.Fatalf("Acquire with a 600-byte invalid name: %v, want ErrInvalidName", err)
	}
	msg := err.Error()
	onePrefix(t, "Acquire with a 600-byte invalid name", msg)
	if len(msg) > 400 || !strings.Contains(msg, `"... (600 bytes) contains a control character`) {
		t.Errorf("Acquire with a 600-byte invalid name: %d-byte message %q, want the name truncated", len(msg), msg)
	}
}
