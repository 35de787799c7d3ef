package rlock_test

import (
	"testing"
	"time"
)

// Readers share the last writer's token even when the fencing counter
// lapsed while that writer held (its renewals keep the writer hash, not the
// counter; a writer granted from the queue keeps the counter for its claim
// window only): a reader under the write hold (a downgrade), and readers
// after the writer's Unlock. (Each got a new token from the server clock,
// one no writer had.)
func TestRWReadersShareTheTokenOfAWriterThatOutlivedTheCounter(t *testing.T) {
	e := ftNewEnv(t)
	const name = "token-outlived"
	fence := e.lockKey(name) + ":rw:fence"
	lapse := func() {
		t.Helper()
		if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(fence).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	rw := e.client().RWMutex(name)
	w, err := rw.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := rw.Token(w)
	lapse()
	down, err := rw.RLock(w)
	if err != nil {
		t.Fatal(err)
	}
	if dt, _ := rw.Token(down); dt != wt {
		t.Errorf("a reader under the write hold got token %d, the writer holds %d", dt, wt)
	}
	if err := rw.RUnlock(down); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the critical section: a write hold past FENCE_KEEP_MS
	lapse()
	if err := rw.Unlock(w); err != nil {
		t.Fatal(err)
	}
	other := e.client().RWMutex(name)
	r, err := other.RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rt, _ := other.Token(r); rt != wt {
		t.Errorf("a reader after the writer's Unlock got token %d, the writer had %d", rt, wt)
	}
	if err := other.RUnlock(r); err != nil {
		t.Fatal(err)
	}
	// The next writer's token is still higher.
	w2, err := other.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if t2, _ := other.Token(w2); t2 <= wt {
		t.Errorf("the next writer got token %d, not above %d", t2, wt)
	}
	if err := other.Unlock(w2); err != nil {
		t.Fatal(err)
	}
}
