package semaphore_test

import (
	"testing"

	"github.com/relockio/relock/semaphore"
)

// A TryAcquire that fails on a counts hash of the wrong type (someone else's
// key) leaves no permit behind in a zset without an expiry.
func TestWrongTypedCountsLeavesNoPermit(t *testing.T) {
	e := newEnv(t)
	s := semaphore.New(e.client(), "wrong-counts", semaphore.WithLimit(2))
	counts := e.base("wrong-counts") + ":counts"
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(counts).Value("not-a-hash").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(e.ctx, 1); err == nil {
		t.Fatal("TryAcquire succeeded against a counts hash of the wrong type")
	}
	for _, key := range e.keys() {
		pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if pttl == -1 && key != counts {
			t.Errorf("%s left without an expiry by the failed TryAcquire", key)
		}
	}
}
