package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

const heldHereNote = "this Client holds the lock through another lock context"

// heldHere fails unless err is the error of a call that waited behind a hold
// of its own Client, ended by a deadline: ErrLocked, the deadline, and a note
// that the Client holds the lock through another lock context.
func heldHere(t *testing.T, err error, deadline bool, what string) {
	t.Helper()
	if !errors.Is(err, rlock.ErrLocked) || deadline && !errors.Is(err, context.DeadlineExceeded) || err == nil || !strings.Contains(err.Error(), heldHereNote) {
		t.Fatalf("%s: %v; want ErrLocked (and the deadline: %v) saying %q", what, err, deadline, heldHereNote)
	}
}

// A Lock with a context that does not carry the Client's own hold of the lock
// (the context given to the first Lock, not its lock context) waits out its
// deadline; the error then says that this Client holds the lock through
// another lock context, for each way the wait can end, and for an RWMutex.
func TestLockHeldThroughAnotherLockContext(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	other := e.client()
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	m := c.Mutex("here")
	l1 := ftLock(t, e.ctx, m)
	_, err := m.Lock(short())
	heldHere(t, err, true, "Mutex Lock(ctx) ended by ctx's deadline")
	_, err = m.Lock(e.ctx, rlock.WithWaitTimeout(300*time.Millisecond))
	heldHere(t, err, true, "Mutex Lock(ctx) ended by the wait timeout")
	_, err = m.TryLock(e.ctx)
	heldHere(t, err, false, "Mutex TryLock(ctx)")
	// Another Client's wait says nothing of the kind.
	if _, err := other.Mutex("here").Lock(short()); !errors.Is(err, rlock.ErrLocked) || strings.Contains(err.Error(), heldHereNote) {
		t.Fatalf("another Client's Lock: %v; want ErrLocked without %q", err, heldHereNote)
	}
	mustUnlockFT(t, m, l1)

	fm := c.FairMutex("here-fair")
	lf := ftLock(t, e.ctx, fm)
	_, err = fm.Lock(short())
	heldHere(t, err, true, "FairMutex Lock(ctx)")
	mustUnlockFT(t, fm, lf)

	rw := c.RWMutex("here-rw")
	w := rwLock(t, e.ctx, rw, true)
	_, err = rw.Lock(short())
	heldHere(t, err, true, "RWMutex Lock(ctx) behind the Client's write lock")
	_, err = rw.RLock(e.ctx, rlock.WithWaitTimeout(300*time.Millisecond))
	heldHere(t, err, true, "RWMutex RLock(ctx) behind the Client's write lock")
	_, err = rw.TryLock(e.ctx)
	heldHere(t, err, false, "RWMutex TryLock(ctx)")
	rwUnlock(t, rw, w, true)
	r := rwLock(t, e.ctx, rw, false)
	_, err = rw.Lock(short())
	heldHere(t, err, true, "RWMutex Lock(ctx) behind the Client's read lock")
	rwUnlock(t, rw, r, false)
}
