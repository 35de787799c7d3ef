package semaphore_test

import (
	"errors"
	"testing"

	"github.com/relockio/relock/semaphore"
)

// A limit lowered under a Client's turn binds that Client too: a release
// that would keep its permit for the next goroutine of the same Client (no
// one else queued: every other Client's Acquire now fails at once) keeps it
// only while the new limit allows it. (The permit went from goroutine to
// goroutine under a limit of 0, while every other Client got
// ErrExceedsLimit.)
func TestLoweredLimitEndsATurn(t *testing.T) {
	e := newEnv(t)
	const name = "turn-under-new-limit"
	other := semaphore.New(e.client(), name, semaphore.WithLimit(1))
	held := mustAcquire(t, other, e.ctx, 1)
	s := semaphore.New(e.client(), name, semaphore.WithLimit(1))
	first := goAcquire(s, e.ctx, 1)
	e.waitQueued(s, 1)
	mustRelease(t, other, held)
	got := receive(t, first, prompt, "the first goroutine") // a turn of s's Client begins
	second := goAcquire(s, e.ctx, 1)
	waitFor(t, prompt, "the second goroutine to wait in its Client", func() bool { return semaphore.LocalWaiters(s) >= 1 })
	if err := semaphore.New(e.client(), name).SetLimit(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrExceedsLimit) {
		t.Fatalf("another Client's TryAcquire under the new limit: %v, want ErrExceedsLimit", err)
	}
	semaphore.EndTurn(s) // the next release goes through Redis
	mustRelease(t, s, got.ctx)
	r := receiveErr(t, second, prompt, "the second goroutine")
	if r.err == nil {
		t.Fatal("the second goroutine got a permit under a limit of 0")
	}
	if !errors.Is(r.err, semaphore.ErrExceedsLimit) {
		t.Errorf("the second goroutine: %v, want ErrExceedsLimit", r.err)
	}
}
