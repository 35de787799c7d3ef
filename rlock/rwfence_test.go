package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// Readers share the last writer's fencing token for as long as any reader
// holds, though a reader holds (renewed by the watchdog) past the time the
// fencing counter is kept after the writer's token: a resource fenced with
// the token (refusing tokens below the highest it saw) must not refuse the
// older reader once a later one came with a higher token. Once the lock is
// idle the counter still expires, and a later writer's token is still higher.
func TestRWReadersShareTokenPastCounterKeep(t *testing.T) {
	e := ftNewEnv(t)
	const watchdog = time.Second
	c1, c2 := e.client(rlock.WithWatchdogTimeout(watchdog)), e.client(rlock.WithWatchdogTimeout(watchdog))
	rw1, rw2 := c1.RWMutex("fenced"), c2.RWMutex("fenced")
	fence := e.lockKey("fenced") + ":rw:fence"

	// A writer with a short fixed lease: the counter is kept 1s past its token.
	w, err := rw1.Lock(e.ctx, rlock.WithLease(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	writerToken, _ := rw1.Token(w)
	if err := rw1.Unlock(w); err != nil {
		t.Fatal(err)
	}
	keep, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(fence).Build()).AsInt64()
	if err != nil || keep <= 0 {
		t.Fatalf("PTTL of the fencing counter after the write Unlock: %d, %v", keep, err)
	}
	r1, err := rw1.RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rw1.RUnlock(r1) }()
	if tok, _ := rw1.Token(r1); tok != writerToken {
		t.Fatalf("first reader's token %d, want the writer's %d", tok, writerToken)
	}
	// Real time passes, past the counter's keep as the writer set it and
	// past the first reader's first lease, while the first reader holds (the
	// watchdog renewing its 1s lease).
	time.Sleep(time.Duration(keep)*time.Millisecond + watchdog + 300*time.Millisecond)
	if r1.Err() != nil {
		t.Fatalf("first reader lost its hold: %v", context.Cause(r1))
	}
	r2, err := rw2.RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := rw2.Token(r2); tok != writerToken {
		t.Fatalf("second reader, while the first holds %d, got token %d: a resource fenced by the token refuses the first now", writerToken, tok)
	}
	if err := rw2.RUnlock(r2); err != nil {
		t.Fatal(err)
	}
	if err := rw1.RUnlock(r1); err != nil {
		t.Fatal(err)
	}

	// Idle: the counter still expires, within a reader's lease and the keep.
	left, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(fence).Build()).AsInt64()
	if err != nil || left <= 0 || left > (watchdog+2*time.Second).Milliseconds() {
		t.Fatalf("PTTL of the fencing counter once idle: %d ms, %v; want it to expire within about a lease and 1s", left, err)
	}
	w, err = rw2.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := rw2.Token(w); tok <= writerToken {
		t.Fatalf("a later writer's token %d is not above the earlier writer's %d", tok, writerToken)
	}
	if err := rw2.Unlock(w); err != nil {
		t.Fatal(err)
	}
}
