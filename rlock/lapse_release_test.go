package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// An inner Unlock (of a re-entered hold) that reaches Redis as the hold
// runs out here (its renewals failed) re-sets the lease of the level it
// leaves, which no one holds any more: the lock is given back, rather than
// held by no one for a whole lease. (It was left held for the 3s lease,
// and another Client waited that long.)
func TestInnerUnlockAsTheHoldLapsesGivesTheLockBack(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	const lease = 3 * time.Second
	c := e.clientOn(fc, rlock.WithWatchdogTimeout(lease), rlock.WithUnlockTimeout(10*time.Second))
	const name = "inner-unlock-lapse"
	m := c.Mutex(name)
	outer := ftLock(t, e.ctx, m)
	inner := ftLock(t, outer, m)
	// Renewals fail without running; the release runs, and its reply
	// comes once the hold has lapsed here.
	fc.set(func(script string) *ftFault {
		switch script {
		case "other":
			return &ftFailCall
		case "release":
			return &ftFault{run: true, hold: true}
		}
		return nil
	})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for { // each call of the release: EVALSHA, and EVAL after NOSCRIPT
			select {
			case done := <-fc.held:
				<-outer.Done()
				close(done)
			case <-stop:
				return
			}
		}
	}()
	if err := m.Unlock(inner); err != nil {
		t.Fatalf("inner Unlock: %v", err)
	}
	fc.set(nil)
	if cause := context.Cause(outer); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Fatalf("the hold ended with %v, want ErrLeaseLost", cause)
	}
	// The release left one level, its lease set afresh: about 3s.
	eventually(t, lease/2, "the level left in Redis given back", func() bool { return len(e.owners(name)) == 0 })
	start := time.Now()
	other := e.client().Mutex(name)
	lc, err := other.Lock(e.ctx)
	if err != nil {
		t.Fatalf("another Client's Lock: %v", err)
	}
	if waited := time.Since(start); waited > lease/2 {
		t.Errorf("another Client waited %v for a lock no one held", waited)
	}
	if err := other.Unlock(lc); err != nil {
		t.Fatal(err)
	}
}
