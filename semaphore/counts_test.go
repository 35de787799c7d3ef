package semaphore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Only a lease of more than one permit is written in the counts hash; a
// one-permit lease is implied by its place in the permits zset. The counts
// hash keeps an expiry, and the count of a lease of two, while one-permit
// leases come and go and move the permits' expiry; when the lease of two
// runs out unreleased its two permits come back; once nothing is held the
// one-permit leases leave the counts hash alone again.
func TestCountsOnlyForLeasesOfMorePermits(t *testing.T) {
	e := newEnv(t)
	const name = "counts"
	s := semaphore.New(e.client(), name, semaphore.WithLimit(3))
	counts := e.base(name) + ":counts"
	countsTTL := func() int64 {
		t.Helper()
		ms, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(counts).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}

	mustRelease(t, s, mustAcquire(t, s, e.ctx, 1))
	if ttl := countsTTL(); ttl != -2 {
		t.Fatalf("counts hash after a one-permit lease: PTTL %d, want no key", ttl)
	}

	two := mustAcquire(t, s, e.ctx, 2, semaphore.WithLease(600*time.Millisecond))
	_ = two // left to run out
	id := e.leases(name)[0]
	if h := e.hgetall(counts); len(h) != 1 || h[id] != "2" {
		t.Fatalf("counts hash after a lease of two = %v, want %s: 2", h, id)
	}
	// One-permit leases with the watchdog's lease move the permits' expiry
	// far past the lease of two.
	for range 5 {
		mustRelease(t, s, mustAcquire(t, s, e.ctx, 1))
		if ttl := countsTTL(); ttl < 0 {
			t.Fatalf("counts hash PTTL %d beside a held lease of two", ttl)
		}
	}
	if h := e.hgetall(counts); h[id] != "2" {
		t.Fatalf("counts hash after one-permit leases = %v, want %s: 2 kept", h, id)
	}

	// The lease of two runs out: all three permits are free again.
	waitFor(t, 5*time.Second, "the lease of two to run out and its permits to come back", func() bool {
		p, err := s.TryAcquire(e.ctx, 3)
		if err != nil {
			return false
		}
		mustRelease(t, s, p)
		return true
	})
	e.wantHeld(s, 0, "every lease ended")
	if h := e.hgetall(counts); len(h) != 0 {
		t.Errorf("counts hash after every lease ended = %v, want empty", h)
	}
	if m := e.hgetall(e.base(name))["m"]; m == "1" {
		t.Errorf("state hash still marks counts after every lease ended")
	}
	mustRelease(t, s, mustAcquire(t, s, e.ctx, 1))
	if ttl := countsTTL(); ttl != -2 {
		t.Errorf("counts hash after a one-permit lease, nothing else held: PTTL %d, want no key", ttl)
	}
}

// A renewed lease of two keeps its count while a one-permit lease of another
// Client has moved the permits' expiry far past it: the renewals then move
// no expiry, so the counts hash must have been given the permits' own. After
// several renewals past the counts hash's first expiry, releasing the lease
// of two gives back two permits, not one.
func TestCountOutlivesMovedExpiry(t *testing.T) {
	e := newEnv(t)
	const (
		name     = "moved"
		watchdog = 300 * time.Millisecond
	)
	renewed := semaphore.New(e.client(rlock.WithWatchdogTimeout(watchdog)), name, semaphore.WithLimit(3))
	other := semaphore.New(e.client(), name, semaphore.WithLimit(3))
	two := mustAcquire(t, renewed, e.ctx, 2)
	one := mustAcquire(t, other, e.ctx, 1, semaphore.WithLease(20*time.Second))
	counts := e.base(name) + ":counts"
	// The counts hash was first given the permits' expiry then: about a
	// watchdog timeout and the slack (1s) after the lease of two began.
	// Watch it past that, over several renewals.
	until := time.Now().Add(watchdog + 1500*time.Millisecond)
	for time.Now().Before(until) {
		if h := e.hgetall(counts); len(h) != 1 || h[e.leaseOf(name, 2)] != "2" {
			t.Fatalf("counts hash beside the renewed lease of two = %v", h)
		}
		if two.Err() != nil {
			t.Fatalf("the lease of two ended: %v", context.Cause(two))
		}
		time.Sleep(50 * time.Millisecond) // polling a negative condition over a span
	}
	mustRelease(t, renewed, two)
	e.wantHeld(other, 1, "releasing the lease of two")
	mustRelease(t, other, one)
	e.wantHeld(other, 0, "every release")
}

// leaseOf returns the permit id of name's lease of n permits: the one the
// counts hash names (or "" when none does).
func (e *env) leaseOf(name string, n int) string {
	e.t.Helper()
	for id, count := range e.hgetall(e.base(name) + ":counts") {
		if count == strconv.Itoa(n) {
			return id
		}
	}
	return ""
}

// A state hash written before m existed (every lease counted, no m): a lease
// of two permits taken then is released as two, not as a one-permit lease.
func TestCountsOfAnEarlierLayout(t *testing.T) {
	e := newEnv(t)
	const name = "earlier"
	s := semaphore.New(e.client(), name, semaphore.WithLimit(3))
	one := mustAcquire(t, s, e.ctx, 1)
	two := mustAcquire(t, s, e.ctx, 2)
	// What the earlier layout wrote: a count for every lease, and no m.
	id := e.leaseOf(name, 2)
	for _, l := range e.leases(name) {
		if l != id {
			if err := e.raw.Do(e.ctx, e.raw.B().Hset().Key(e.base(name)+":counts").FieldValue().FieldValue(l, "1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.raw.Do(e.ctx, e.raw.B().Hdel().Key(e.base(name)).Field("m").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, s, two)
	e.wantHeld(s, 1, "releasing the lease of two")
	mustRelease(t, s, one)
	e.wantHeld(s, 0, "every release")
}

// wantHeld fails the test unless s's state counts n permits held.
func (e *env) wantHeld(s *semaphore.Semaphore, n int64, after string) {
	e.t.Helper()
	if st := e.state(s); st.Held != n {
		e.t.Fatalf("after %s: state %s, want %d permit(s) held", after, stateString(st), n)
	}
}
