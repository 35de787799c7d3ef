package core

import (
	"testing"
	"time"
)

func newTestRetries(t *testing.T) *renewRetries {
	r := &renewRetries{timer: time.NewTimer(time.Hour)}
	r.timer.Stop()
	t.Cleanup(func() { r.timer.Stop() })
	return r
}

// A try of an earlier round that reports after the next round did (the
// order in which their goroutines happened to end) leaves that round's tries
// scheduled: its hold is tried again within the period, as a master that
// fails over needs, not only at the round after.
func TestRenewRetryOfEarlierRoundKeepsLaterTries(t *testing.T) {
	const period = 10 * time.Second
	r := newTestRetries(t)
	held := []*Hold{{}}
	start := time.Now()
	// Round 1 fails: tried again soon.
	r.settle(renewDone{failed: held, until: start.Add(period)}, start)
	if r.next.IsZero() {
		t.Fatal("a failed round scheduled no try")
	}
	// Its last try starts just before round 2 and is still running when
	// round 2 reports its own failure.
	round2 := start.Add(period)
	r.settle(renewDone{failed: held, until: round2.Add(period)}, round2.Add(5*time.Millisecond))
	want := r.next
	if want.IsZero() {
		t.Fatal("round 2 failed and scheduled no try")
	}
	// The try of round 1 fails and reports last.
	r.settle(renewDone{failed: held, until: start.Add(period), again: true}, round2.Add(150*time.Millisecond))
	if r.next.IsZero() {
		t.Fatalf("a try of round 1 reporting after round 2 stopped round 2's tries: the hold waits for round 3 (%v after round 2)", period)
	}
	if !r.next.Equal(want) || !r.until.Equal(round2.Add(period)) {
		t.Errorf("a try of round 1 changed round 2's schedule: next try %v, round due %v; want %v, %v",
			r.next.Sub(start), r.until.Sub(start), want.Sub(start), round2.Add(period).Sub(start))
	}
}

// Tries of one round back off from renewRetryMin to renewRetryMax and stop
// before the next round, which sends every hold again.
func TestRenewRetriesBackOffUntilTheNextRound(t *testing.T) {
	const period = 2 * time.Second
	r := newTestRetries(t)
	held := []*Hold{{}}
	start := time.Now()
	until := start.Add(period)
	r.settle(renewDone{failed: held, until: until}, start)
	var waits []time.Duration
	now := start
	for !r.next.IsZero() {
		waits = append(waits, r.next.Sub(now))
		now = r.next
		r.settle(renewDone{failed: held, until: until, again: true}, now)
	}
	if len(waits) < 3 || waits[0] != renewRetryMin || waits[len(waits)-1] != renewRetryMax {
		t.Fatalf("tries waited %v: want %v doubling to %v", waits, renewRetryMin, renewRetryMax)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] != min(2*waits[i-1], renewRetryMax) {
			t.Fatalf("tries waited %v: want each twice the one before, at most %v", waits, renewRetryMax)
		}
	}
	if now.After(until) || until.Sub(now) > renewRetryMax {
		t.Errorf("the last try ran %v before the next round: want within %v of it", until.Sub(now), renewRetryMax)
	}
	// A renewal that succeeds schedules nothing.
	r.settle(renewDone{until: until.Add(period)}, until)
	if !r.next.IsZero() {
		t.Errorf("a round with no failure scheduled a try at %v", r.next.Sub(until))
	}
}
