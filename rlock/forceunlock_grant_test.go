package rlock_test

import (
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// pending is how many messages the gate holds back.
func (g *fnGate) pending() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.held) }

// TestForceUnlockRightAfterGrant force-unlocks a lock just handed to a
// queued waiter, before the waiter's Client read the grant: the grant and
// the ForceUnlock's message to that owner reach the Client together, so the
// message comes before the Client listens for it as a holder (its cohort's
// watch). The Client must still count the hold as revoked: its next release
// goes through Redis, and the goroutine waiting behind it is not passed the
// lock while another Client holds it (its token would then be below that
// Client's).
func TestForceUnlockRightAfterGrant(t *testing.T) {
	e := ftNewEnv(t)
	const name = "forcegrant"
	holder := e.client().Mutex(name)
	other := e.client().Mutex(name)
	// The claim window as long as the lease: the grant needs no extension,
	// whose refusal would end the hold before it could pass the lock on.
	wc, fc := e.fnClient(rlock.WithClaimWindow(rlock.DefaultWatchdogTimeout))
	w := wc.Mutex(name)
	fnMustUnlock(t, holder, fnMustLock(t, holder, e.ctx)) // scripts loaded
	held := fnMustLock(t, holder, e.ctx)
	first := fnGoLock(w, e.ctx)
	owner := e.queuedOwner(name, 1)
	second := fnGoLock(w, e.ctx)
	e.eventually(ftPatience, "second waits in its Client", func() bool { return rlock.WaitingInClient(wc, name) == 2 })

	fc.g.close()
	fnMustUnlock(t, holder, held) // hands the lock to first
	e.eventually(ftPatience, "the lock handed to first", func() bool {
		n, err := e.raw.Do(e.ctx, e.raw.B().Hexists().Key(e.lockKey(name)).Field(owner).Build()).AsBool()
		return err == nil && n
	})
	if ok, err := holder.ForceUnlock(e.ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v; want true, nil", ok, err)
	}
	e.eventually(ftPatience, "the grant and the force-unlock's message held back", func() bool { return fc.g.pending() >= 2 })
	lc := fnMustLock(t, other, e.ctx) // free after the force-unlock
	tokOther, err := other.Token(lc)
	if err != nil {
		t.Fatal(err)
	}
	fc.g.open()

	r1 := fnAwait(t, first, 5*time.Second, "first, granted before the force-unlock")
	err = w.Unlock(r1.ctx)
	t.Logf("first's Unlock: %v", err)
	select {
	case r2 := <-second:
		tok, _ := w.Token(r2.ctx)
		t.Fatalf("second was passed the lock (token %d) while another Client holds it (token %d)", tok, tokOther)
	default:
	}
	fnMustUnlock(t, other, lc)
	r2 := fnAwait(t, second, 5*time.Second, "second, after the other Client unlocked")
	tok2, err := w.Token(r2.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok2 <= tokOther {
		t.Errorf("second's token %d is not above %d, the token of the Client that held the lock before it", tok2, tokOther)
	}
	fnMustUnlock(t, w, r2.ctx)
}
