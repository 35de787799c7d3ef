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
	_, try1 := r.take()
	round2 := start.Add(period)
	r.settle(renewDone{failed: held, until: round2.Add(period)}, round2.Add(5*time.Millisecond))
	want := r.next
	if want.IsZero() {
		t.Fatal("round 2 failed and scheduled no try")
	}
	// The try of round 1 fails and reports last.
	try1.failed = held
	r.settle(try1, round2.Add(150*time.Millisecond))
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
		holds, try := r.take()
		try.failed = holds
		r.settle(try, now)
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

// A round's reports come node by node, a node that hangs last: the holds of
// a node that failed fast are tried again at once, not after the hung
// node's answer, and those of a node that fails later join the try due.
func TestRenewRetriesNodeByNode(t *testing.T) {
	const period = 10 * time.Second
	r := newTestRetries(t)
	fast, later := []*Hold{{}}, []*Hold{{}, {}}
	start := time.Now()
	round := renewDone{until: start.Add(period)}
	// The first node fails fast; the second (hanging) has not answered.
	d := round
	d.failed = fast
	r.settle(d, start.Add(time.Millisecond))
	if r.next.IsZero() || r.next.Sub(start) > renewRetryMin+time.Millisecond {
		t.Fatalf("the holds of a node that failed fast wait for %v, want a try within %v", r.next.Sub(start), renewRetryMin)
	}
	first := r.next
	// A third node fails a little later: its holds join the try due.
	d.failed = later
	r.settle(d, start.Add(5*time.Millisecond))
	if !r.next.Equal(first) {
		t.Errorf("a later failure moved the try due from %v to %v", first.Sub(start), r.next.Sub(start))
	}
	holds, try := r.take()
	if len(holds) != len(fast)+len(later) || !try.again || try.wait != renewRetryMin {
		t.Fatalf("the try got %d holds (want %d), again %v, wait %v", len(holds), len(fast)+len(later), try.again, try.wait)
	}
	// The hung node answers a period later, after the next round began:
	// its report is of an earlier round and changes nothing.
	next := renewDone{until: start.Add(2 * period)}
	r.settle(next, start.Add(period))
	d.failed = fast
	r.settle(d, start.Add(period+time.Second))
	if !r.next.IsZero() || len(r.pending) != 0 {
		t.Errorf("a report of the round before scheduled a try at %v with %d holds", r.next.Sub(start), len(r.pending))
	}
}
