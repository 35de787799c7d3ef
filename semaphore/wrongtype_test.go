package semaphore_test

import (
	"testing"

	"github.com/relockio/relock/semaphore"
)

// A TryAcquire of two permits, which counts them in the counts hash, fails
// on a counts hash of the wrong type (someone else's key) and leaves no
// permit behind in a zset without an expiry. A one-permit lease, which the
// hash does not count, is taken and given back as usual.
func TestWrongTypedCountsLeavesNoPermit(t *testing.T) {
	e := newEnv(t)
	s := semaphore.New(e.client(), "wrong-counts", semaphore.WithLimit(2))
	counts := e.base("wrong-counts") + ":counts"
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(counts).Value("not-a-hash").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(e.ctx, 2); err == nil {
		t.Fatal("TryAcquire of two permits succeeded against a counts hash of the wrong type")
	}
	if l := e.leases("wrong-counts"); len(l) != 0 {
		t.Errorf("leases after the failed TryAcquire: %q", l)
	}
	p, err := s.TryAcquire(e.ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire of one permit: %v", err)
	}
	if err := s.Release(p); err != nil {
		t.Fatalf("Release of one permit: %v", err)
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
