package rlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// An uncontended Mutex hold is one key in Redis: its hash records its tokens,
// and the fencing counter is written only when it is released (beside the
// release's retry latch). A lease under 1s keeps the counter while held.
func TestUncontendedHoldIsOneKey(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	const name = "one-key"
	m := c.Mutex(name)
	l := ftLock(t, e.ctx, m)
	if keys := e.keysUnder(); !slices.Equal(keys, []string{e.lockKey(name)}) {
		t.Fatalf("keys while held: %q; want the lock hash alone", keys)
	}
	info, err := m.Inspect(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := m.Token(l)
	if err != nil {
		t.Fatal(err)
	}
	if info.Holder == nil || info.Holder.Token != tok || info.Fence < tok {
		t.Fatalf("Inspect while held: holder %+v, fence %d; want the token %d and a fence at or above it", info.Holder, info.Fence, tok)
	}
	mustUnlockFT(t, m, l)
	fence := e.lockKey(name) + ":fence"
	keys := e.keysUnder()
	if !slices.Contains(keys, fence) || len(keys) != 2 || !strings.Contains(strings.Join(keys, " "), ":latch:") {
		t.Fatalf("keys after Unlock: %q; want the fencing counter and the release's retry latch", keys)
	}
	got, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(fence).Build()).AsUint64()
	if err != nil {
		t.Fatal(err)
	}
	if got != info.Fence {
		t.Fatalf("counter after Unlock %d; want the hold's last token %d", got, info.Fence)
	}
	e.allExpire("after Unlock")

	short := c.Mutex("short")
	l = ftLock(t, e.ctx, short, rlock.WithLease(500*time.Millisecond))
	if !e.exists(e.lockKey("short") + ":fence") {
		t.Fatal("a hold with a 500ms lease has no fencing counter: one that expired would leave less than 1s between its tokens and a counter made afresh")
	}
	mustUnlockFT(t, short, l)
}

// setAhead records on the hash of a held lock a last token 10s ahead of the
// clock, as a hold that passed many tokens on would, so that what comes next
// must start above it and not from the clock.
func setAhead(t *testing.T, e *ftEnv, name string) uint64 {
	t.Helper()
	ahead := uint64(time.Now().Add(10 * time.Second).UnixMicro())
	if err := e.raw.Do(e.ctx, e.raw.B().Hset().Key(e.lockKey(name)).FieldValue().FieldValue("l", strconv.FormatUint(ahead, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return ahead
}

// Whatever ends a hold whose tokens the counter does not record, the next
// token is above every token of its block: after Unlock, a hand-off, a
// ForceUnlock, and the hash's expiry.
func TestTokensRiseAboveAnUncountedHold(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(), e.client()
	token := func(m *rlock.Mutex, l context.Context) uint64 {
		t.Helper()
		tok, err := m.Token(l)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	t.Run("unlock", func(t *testing.T) {
		m := a.Mutex("unlock")
		l := ftLock(t, e.ctx, m)
		ahead := setAhead(t, e, "unlock")
		mustUnlockFT(t, m, l)
		l = ftLock(t, e.ctx, b.Mutex("unlock"))
		if tok := token(b.Mutex("unlock"), l); tok <= ahead {
			t.Fatalf("token %d after a hold whose block ended at %d", tok, ahead)
		}
		mustUnlockFT(t, b.Mutex("unlock"), l)
	})

	t.Run("hand-off", func(t *testing.T) {
		m := a.Mutex("handoff")
		l := ftLock(t, e.ctx, m)
		ahead := setAhead(t, e, "handoff")
		got := make(chan uint64, 1)
		go func() {
			wm := b.Mutex("handoff")
			wl, err := wm.Lock(e.ctx)
			if err != nil {
				t.Error(err)
				got <- 0
				return
			}
			tok, _ := wm.Token(wl)
			_ = wm.Unlock(wl)
			got <- tok
		}()
		e.eventually(ftPatience, "the waiter queued", func() bool { return e.exists(e.lockKey("handoff") + ":queue") })
		mustUnlockFT(t, m, l)
		if tok := <-got; tok <= ahead {
			t.Fatalf("token %d handed off after a hold whose block ended at %d", tok, ahead)
		}
	})

	t.Run("force unlock", func(t *testing.T) {
		m := a.Mutex("force")
		ftLock(t, e.ctx, m)
		ahead := setAhead(t, e, "force")
		if ok, err := b.Mutex("force").ForceUnlock(e.ctx); err != nil || !ok {
			t.Fatalf("ForceUnlock = %v, %v", ok, err)
		}
		l := ftLock(t, e.ctx, b.Mutex("force"))
		if tok := token(b.Mutex("force"), l); tok <= ahead {
			t.Fatalf("token %d after a forced-out hold whose block ended at %d", tok, ahead)
		}
		mustUnlockFT(t, b.Mutex("force"), l)
	})

	t.Run("expiry", func(t *testing.T) {
		m := a.Mutex("expiry")
		l := ftLock(t, e.ctx, m, rlock.WithLease(time.Second))
		first := token(m, l)
		if e.exists(e.lockKey("expiry") + ":fence") {
			t.Fatal("an uncontended hold with a 1s lease kept the fencing counter")
		}
		e.eventually(time.Second+ftPatience, "the hold expired", func() bool { return !e.exists(e.lockKey("expiry")) })
		l = ftLock(t, e.ctx, b.Mutex("expiry"))
		if tok := token(b.Mutex("expiry"), l); tok <= first+64 {
			t.Fatalf("token %d after an expired hold of tokens %d..%d", tok, first, first+64)
		}
		mustUnlockFT(t, b.Mutex("expiry"), l)
	})
}

// A retried Unlock reports the first attempt's outcome: released, even after
// a hold longer than its lease (whose tokens the counter's expiry no longer
// covers), and the hold's loss when no attempt ran before its lease ran out
// and another holder came and went.
func TestRetriedUnlockOfAnUncountedHold(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	a := e.clientOn(fc, rlock.WithWatchdogTimeout(time.Second))
	b := e.client()
	warm := a.Mutex("warm") // the scripts loaded: a fault hits a call that runs
	mustUnlockFT(t, warm, ftLock(t, e.ctx, warm))

	t.Run("ran after a long hold", func(t *testing.T) {
		m := a.Mutex("long")
		l := ftLock(t, e.ctx, m)
		tok, err := m.Token(l)
		if err != nil {
			t.Fatal(err)
		}
		serverMicros := func() uint64 {
			v, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsIntSlice()
			if err != nil || len(v) != 2 {
				t.Fatalf("TIME: %v, %v", v, err)
			}
			return uint64(v[0])*1_000_000 + uint64(v[1])
		}
		e.eventually(ftPatience, "1.3s past the hold's tokens", func() bool { return serverMicros() > tok+1_300_000 })
		fc.set(once("release", ftLoseReply))
		if err := m.Unlock(l); err != nil {
			t.Fatalf("Unlock whose first attempt freed the lock (its reply lost): %v; want nil", err)
		}
		if e.exists(e.lockKey("long")) {
			t.Fatal("the lock is still held")
		}
	})

	t.Run("never ran before the lease ended", func(t *testing.T) {
		m := a.Mutex("lost")
		l := ftLock(t, e.ctx, m, rlock.WithLease(time.Second))
		fc.set(once("release", ftFault{lose: true, hold: true}))
		done := make(chan error, 1)
		go func() { done <- m.Unlock(l) }()
		let := <-fc.held
		e.eventually(time.Second+ftPatience, "the hold expired", func() bool { return !e.exists(e.lockKey("lost")) })
		mustUnlockFT(t, b.Mutex("lost"), ftLock(t, e.ctx, b.Mutex("lost")))
		close(let)
		if err := <-done; !errors.Is(err, rlock.ErrLeaseLost) {
			t.Fatalf("Unlock of a hold lost before any release ran: %v; want ErrLeaseLost", err)
		}
	})
}

// A re-entry (or an inner Unlock) that sets a lease under 1s on a hold whose
// tokens the counter does not record gives them to the counter: the hold may
// now expire sooner than the counter's keep time after them.
func TestShortLeaseReentryWritesTheCounter(t *testing.T) {
	e := ftNewEnv(t)
	m := e.client().Mutex("short-reentry")
	fence := e.lockKey("short-reentry") + ":fence"
	l := ftLock(t, e.ctx, m)
	if e.exists(fence) {
		t.Fatal("setup: an uncontended watchdog hold wrote the counter")
	}
	info, err := m.Inspect(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ftLock(t, l, m, rlock.WithLease(200*time.Millisecond))
	counter, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(fence).Build()).AsUint64()
	if err != nil {
		t.Fatalf("no counter after a re-entry with a 200ms lease: %v", err)
	}
	if counter < info.Fence {
		t.Fatalf("counter %d after the re-entry, below the hold's last token %d", counter, info.Fence)
	}
	pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(fence).Build()).AsInt64()
	if err != nil || pttl < 500 {
		t.Fatalf("counter's PTTL %d, %v: want it kept 1s past the tokens", pttl, err)
	}
	if !e.exists(e.lockKey("short-reentry")) || l.Err() != nil {
		t.Fatal("setup: the hold ended")
	}
}
