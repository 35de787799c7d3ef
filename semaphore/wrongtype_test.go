package semaphore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
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

// Beside someone else's key at the counts hash's name, one-permit leases come
// and go: a lease that ran out is reclaimed by a TryAcquire of two permits,
// which then fails before it changes anything (the lease of two cannot be
// counted), so the state still counts exactly the leases held. Renewals of
// a one-permit lease leave the foreign key as it was, and Inspect reads past
// it.
func TestWrongTypedCountsBesideOnePermitLeases(t *testing.T) {
	e := newEnv(t)
	const name = "wrong-counts-beside"
	c := e.client(rlock.WithWatchdogTimeout(300 * time.Millisecond))
	s := semaphore.New(c, name, semaphore.WithLimit(3))
	counts := e.base(name) + ":counts"
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(counts).Value("not-a-hash").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, s, e.ctx, 1)
	short := mustAcquire(t, s, e.ctx, 1, semaphore.WithLease(200*time.Millisecond))
	<-short.Done()
	// Until Redis's clock, too, is past the short lease.
	waitFor(t, 5*time.Second, "the short lease to end in Redis", func() bool {
		first, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.base(name)+":permits").Min("0").Max("0").Withscores().Build()).AsZScores()
		if err != nil || len(first) == 0 {
			return err == nil
		}
		now, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseFloat(now[0], 64)
		return first[0].Score < sec*1000
	})
	if _, err := s.TryAcquire(e.ctx, 2); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("TryAcquire of two permits beside the foreign key: %v, want a WRONGTYPE error", err)
	}
	if st := e.state(s); st.Held != 1 {
		t.Errorf("after the refused TryAcquire: state %s, want the one live lease held", stateString(st))
	}
	// Two of three permits are free: both can be taken.
	for i := range 2 {
		p, err := s.TryAcquire(e.ctx, 1)
		if err != nil {
			t.Fatalf("one-permit TryAcquire %d with two permits free: %v", i+1, err)
		}
		defer mustRelease(t, s, p)
	}
	if _, err := s.Inspect(e.ctx); err != nil {
		t.Errorf("Inspect beside the foreign key: %v", err)
	}
	// Renewals of the held lease (every 100ms) over several of its leases.
	until := time.Now().Add(time.Second)
	for time.Now().Before(until) {
		if held.Err() != nil {
			t.Fatalf("the renewed lease ended: %v", context.Cause(held))
		}
		time.Sleep(50 * time.Millisecond) // polling a negative condition over a span
	}
	if pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(counts).Build()).AsInt64(); err != nil || pttl != -1 {
		t.Errorf("the foreign key's PTTL after renewals = %d, %v; want -1, as its owner left it", pttl, err)
	}
	mustRelease(t, s, held)
}
