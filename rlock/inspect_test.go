package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// inspectHolder inspects the Mutex and returns its holder and fencing
// counter, failing the test when it is free.
func inspectHolder(t *testing.T, ctx context.Context, m *rlock.Mutex) (rlock.Holder, uint64) {
	t.Helper()
	info, err := m.Inspect(ctx)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if info.Holder == nil {
		t.Fatal("Inspect: no holder")
	}
	return *info.Holder, info.Fence
}

func mustToken(t *testing.T, m *rlock.Mutex, lc context.Context) uint64 {
	t.Helper()
	tok, err := m.Token(lc)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

// Inspect reports the token Redis granted the holder: the one its Token
// returns after TryLock and after a Lock that found the lock free, and after a
// hand-off from another Client (the first of the block it reserved). A
// goroutine of the holder's Client passed the lock without Redis holds a
// later token of the block, at most Fence.
func TestInspectHolderToken(t *testing.T) {
	e := ftNewEnv(t)
	const name = "inspect-token"
	c, other := e.client(), e.client()
	m := c.Mutex(name)
	// (A hand-off may inspect as a claim or not, as its extension, a third
	// of the claim window later, ran or not: see TestInspectClaimUntilExtended.)
	check := func(what string, lc context.Context, h *rlock.Mutex, client *rlock.Client, handed bool) uint64 {
		t.Helper()
		tok := mustToken(t, h, lc)
		got, fence := inspectHolder(t, e.ctx, h)
		if got.Token != tok || got.ClientID != client.ID() || got.Claim && !handed || tok > fence {
			t.Errorf("%s: holder %+v, fence %d; want Client %s with token %d", what, got, fence, client.ID(), tok)
		}
		return tok
	}

	lc, err := m.TryLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("TryLock", lc, m, c, false)
	mustUnlockFT(t, m, lc)

	lc = ftLock(t, e.ctx, m)
	first := check("uncontended Lock", lc, m, c, false)

	// A hand-off to another Client's waiter.
	ch := lockAsync(e.ctx, other.Mutex(name))
	e.queuedIs(1)
	mustUnlockFT(t, m, lc)
	r := receiveLock(t, ch, ftPatience, "the other Client's waiter")
	handed := check("hand-off", r.lc, other.Mutex(name), other, true)
	if handed <= first {
		t.Errorf("token handed over = %d, want above %d", handed, first)
	}

	// Passed between goroutines of one Client: the hand-off reserved a block
	// of tokens, and a goroutine passed the lock without Redis holds a later
	// token of it (one passed through Redis, the token granted).
	om := other.Mutex(name)
	local := lockAsync(e.ctx, om)
	e.eventually(ftPatience, "a goroutine of the holder's Client waits", func() bool {
		return rlock.WaitingInClient(other, name) == 1 || len(e.sortedSetMembers()) > 0
	})
	mustUnlockFT(t, om, r.lc)
	p := receiveLock(t, local, ftPatience, "the goroutine passed the lock")
	tok := mustToken(t, om, p.lc)
	got, fence := inspectHolder(t, e.ctx, om)
	if got.ClientID != other.ID() || got.Token < handed || got.Token > tok || tok > fence {
		t.Errorf("after a pass within the Client: holder %+v, fence %d; want Client %s with a token from %d to %d (held now), at most the fence",
			got, fence, other.ID(), handed, tok)
	}
	t.Logf("pass within the Client: holder token %d, the goroutine's %d, fence %d", got.Token, tok, fence)
	mustUnlockFT(t, om, p.lc)
}

// A TryLock hold has no tokens to spare: a goroutine of its Client that
// waits for it gets the lock through Redis (kept for it, or granted to its
// own place), and Inspect reports the token it was granted.
func TestInspectTokenAfterPassThroughRedis(t *testing.T) {
	e := ftNewEnv(t)
	const name = "inspect-token-kept"
	c := e.client()
	m := c.Mutex(name)
	lc, err := m.TryLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := mustToken(t, m, lc)
	next := lockAsync(e.ctx, m)
	e.eventually(ftPatience, "a goroutine of the Client waits", func() bool {
		return rlock.WaitingInClient(c, name) == 1 || len(e.sortedSetMembers()) > 0
	})
	locally := rlock.WaitingInClient(c, name) == 1
	mustUnlockFT(t, m, lc)
	r := receiveLock(t, next, ftPatience, "the waiting goroutine")
	tok := mustToken(t, m, r.lc)
	got, fence := inspectHolder(t, e.ctx, m)
	if got.Token != tok || tok <= first || tok > fence {
		t.Errorf("holder %+v, fence %d; want token %d (the goroutine's), above %d", got, fence, tok, first)
	}
	t.Logf("waited in its Client: %v; token %d, fence %d", locally, tok, fence)
	mustUnlockFT(t, m, r.lc)
}

// inspectClaimWindow is long enough that a claim held back at its extension
// (due a third of the way in) is inspected well before it lapses.
const inspectClaimWindow = 9 * time.Second

// A lock handed to a waiter for its claim window inspects as a claim, with
// the token granted, until the Client's extension runs; then as a hold of the
// whole lease, same token. The same for an RWMutex writer, and for an
// RWMutex reader (whose claim its lease's score in the readers zset tells).
func TestInspectClaimUntilExtended(t *testing.T) {
	for _, kind := range []string{"mutex", "rw", "reader"} {
		t.Run(kind, func(t *testing.T) {
			e := ftNewEnv(t)
			name := "inspect-claim-" + kind
			gate := redistest.NewGate(redistest.Client(t, e.srv), e.lockKey(name))
			holder, grantee := e.client(), e.clientOn(gate, rlock.WithClaimWindow(inspectClaimWindow))
			lock, inspect := claimLock(t, e, kind, name, holder, grantee)
			lc, tok := lock()
			select {
			case <-gate.Reached():
			case <-time.After(ftPatience):
				t.Fatal("the claim extension was never sent")
			}
			h := inspect()
			if h.ClientID != grantee.ID() || !h.Claim || h.Token != tok || h.LeaseLeft > inspectClaimWindow {
				t.Fatalf("before the extension: holder %+v; want Client %s, a claim of at most %v, token %d",
					h, grantee.ID(), inspectClaimWindow, tok)
			}
			gate.Open()
			e.eventually(ftPatience, "the claim inspected as extended", func() bool { return !inspect().Claim })
			if h := inspect(); h.Token != tok || h.LeaseLeft <= inspectClaimWindow {
				t.Errorf("after the extension: holder %+v; want token %d, the lease", h, tok)
			}
			if err := context.Cause(lc); err != nil {
				t.Fatalf("the grantee's hold ended: %v", err)
			}
		})
	}
}

// claimLock sets up a hand-off from holder to a waiter of grantee on a lock of
// kind (mutex; rw: an RWMutex writer; reader: an RWMutex reader, handed the
// lock by a writer): lock runs it and returns the grantee's lock context and
// token (the hold is released at cleanup); inspect reads the grantee's hold.
func claimLock(t *testing.T, e *ftEnv, kind, name string, holder, grantee *rlock.Client) (
	lock func() (context.Context, uint64), inspect func() rlock.Holder) {
	if kind == "mutex" {
		m := grantee.Mutex(name)
		return func() (context.Context, uint64) {
				held := ftLock(t, e.ctx, holder.Mutex(name))
				ch := lockAsync(e.ctx, m)
				e.queuedIs(1)
				mustUnlockFT(t, holder.Mutex(name), held)
				r := receiveLock(t, ch, ftPatience, "the grantee")
				t.Cleanup(func() { _ = m.Unlock(r.lc) })
				return r.lc, mustToken(t, m, r.lc)
			}, func() rlock.Holder {
				h, _ := inspectHolder(t, e.ctx, m)
				return h
			}
	}
	rw, write := grantee.RWMutex(name), kind == "rw"
	return func() (context.Context, uint64) {
			held := rwLock(t, e.ctx, holder.RWMutex(name), true)
			ch := rwLockAsync(e.ctx, rw, write)
			e.rwQueuedIs(name, 1)
			rwUnlock(t, holder.RWMutex(name), held, true)
			r := receiveLock(t, ch, ftPatience, "the grantee")
			t.Cleanup(func() {
				if write {
					_ = rw.Unlock(r.lc)
				} else {
					_ = rw.RUnlock(r.lc)
				}
			})
			tok, err := rw.Token(r.lc)
			if err != nil {
				t.Fatal(err)
			}
			return r.lc, tok
		}, func() rlock.Holder {
			info, err := rw.Inspect(e.ctx)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if write && info.Writer != nil {
				return *info.Writer
			}
			if !write && info.Writer == nil && len(info.Readers) == 1 {
				return info.Readers[0]
			}
			t.Fatalf("Inspect: %+v; want the grantee's hold alone", info)
			return rlock.Holder{}
		}
}
