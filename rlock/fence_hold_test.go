package rlock_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// An uncontended Mutex hold is one key in Redis: its hash records its tokens,
// and the fencing counter comes back only when it is released, with no
// latch beside it. A lease under 1s keeps the counter while held, as before.
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
	if keys := e.keysUnder(); !slices.Equal(keys, []string{fence}) {
		t.Fatalf("keys after Unlock: %q; want the fencing counter alone", keys)
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
