package core

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// These tests drive core.Turns alone, without Redis, on a synctest bubble's
// fake clock: holds are made by hand, and what a kind would do in Redis
// (give a pass back, give up a place) is recorded by fakeLock. The Redis
// side is covered by the rlock and semaphore tests of turns.

const (
	testLease  = 30 * time.Second
	testLinger = 10 * time.Millisecond
)

// fakeLock is a lock of a kind that records what it is asked to do in Redis.
type fakeLock struct {
	name   string
	mu     sync.Mutex
	given  []*Pass      // passes given back (GiveBack)
	places []*Promotion // places given up (GiveUpPlace)
}

func (l *fakeLock) TurnName() string { return l.name }

func (l *fakeLock) GiveBack(p *Pass) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.given = append(l.given, p)
}

func (l *fakeLock) GiveUpPlace(p *Promotion, _ bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.places = append(l.places, p)
}

func (l *fakeLock) givenBack() []*Pass {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Pass(nil), l.given...)
}

func (l *fakeLock) givenUp() []*Promotion {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Promotion(nil), l.places...)
}

// fakeWatch is a TurnWatch a test can make deaf or signal.
type fakeWatch struct {
	dead bool
	c    chan struct{}
	left bool
}

func newFakeWatch() *fakeWatch { return &fakeWatch{c: make(chan struct{}, 1)} }

func (w *fakeWatch) Live() bool           { return !w.dead }
func (w *fakeWatch) C() <-chan struct{}   { return w.c }
func (w *fakeWatch) Leave(satisfied bool) { w.left = true }

// turnsEnv is one Client's turn table, on the bubble's clock.
type turnsEnv struct {
	t    *testing.T
	c    *Client
	tt   *Turns
	lock *fakeLock
}

func newTurnsEnv(t *testing.T, linger time.Duration) *turnsEnv {
	c := &Client{closed: make(chan struct{}), holds: make(map[*Hold]struct{})}
	tt := newTurns(c, linger)
	tt.after = func(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
	return &turnsEnv{t: t, c: c, tt: tt, lock: &fakeLock{name: "l"}}
}

// hold makes a renewed hold with token and lease, valid from now.
func (e *turnsEnv) hold(owner string, token uint64, lease time.Duration) *Hold {
	h := e.c.NewHold(HoldSpec{Kind: &Kind{Name: "test"}, Name: e.lock.name, Key: "k", Owner: owner, Token: token, Lease: lease, Renew: true})
	h.StartFrom(time.Now().Add(lease), e.c.Epoch())
	e.t.Cleanup(func() { h.End(errors.New("test over")) })
	return h
}

// adopt makes the hold a pass becomes, as a kind's holdPassed does.
func (e *turnsEnv) adopt(p *Pass) *Hold {
	h := e.c.NewHold(HoldSpec{Kind: &Kind{Name: "test"}, Name: e.lock.name, Key: "k", Owner: p.Owner, Token: p.Token, Lease: p.Lease, Renew: true})
	h.StartFrom(p.Until, p.Epoch)
	e.tt.Adopt(e.lock.name, h)
	e.t.Cleanup(func() { h.End(errors.New("test over")) })
	return h
}

// formed is a contended turn: a leader that took the lock in Redis with
// tokens 10..last, watched by w (nil: a kind without a watch).
func (e *turnsEnv) formed(last uint64, w TurnWatch) *Hold {
	lw, lead := e.tt.Join(e.lock.name)
	if !lead {
		e.t.Fatal("the first waiter is not the leader")
	}
	h := e.hold("o", 10, testLease)
	e.tt.Form(e.lock.name, h, last, lw, w, true)
	if _, promo := e.tt.Leave(e.lock.name, lw); promo != nil {
		e.t.Fatal("a leader that acquired left with a promotion")
	}
	return h
}

func ready(lw *TurnWaiter) bool {
	select {
	case <-lw.Ready():
		return true
	default:
		return false
	}
}

// TestTurnsPassInArrivalOrder: a release passes the lock to the oldest local
// waiter, with the next fencing token, and each new holder passes it on in
// turn; a waiter that leaves is skipped.
func TestTurnsPassInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, 0)
		h := e.formed(20, newFakeWatch())
		var ws []*TurnWaiter
		for range 4 {
			lw, lead := e.tt.Join("l")
			if lead || ready(lw) {
				t.Fatal("a waiter behind the holder leads, or is ready")
			}
			ws = append(ws, lw)
		}
		if p, _ := e.tt.Leave("l", ws[1]); p != nil {
			t.Fatal("a waiter that was passed nothing left with a pass")
		}
		want := []uint64{11, 12, 13}
		for i, lw := range []*TurnWaiter{ws[0], ws[2], ws[3]} {
			if !e.tt.PassOn("l", h) {
				t.Fatalf("pass %d refused", i)
			}
			if !ready(lw) {
				t.Fatalf("pass %d went to another waiter", i)
			}
			p := e.tt.Take(lw, nil)
			if p == nil || p.Token != want[i] || p.Owner != "o" {
				t.Fatalf("pass %d = %+v, want owner o, token %d", i, p, want[i])
			}
			if p, _ := e.tt.Leave("l", lw); p != nil {
				t.Fatal("a pass taken is returned by Leave")
			}
			h = e.adopt(p)
		}
		if e.tt.PassOn("l", h) {
			t.Fatal("passed with no one waiting")
		}
		e.tt.Dissolve("l", h)
		if e.tt.Active("l") {
			t.Fatal("the turn outlived its last hold and waiter")
		}
	})
}

// TestTurnsBudget: a turn passes TurnMaxPasses times within TurnBurst of its
// acquisition, TurnPasses times once that has passed, and never beyond its
// block of fencing tokens (a kind without tokens has no such bound).
func TestTurnsBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		last  uint64
		sleep time.Duration
		want  int
	}{
		{"burst", 10 + TurnMaxPasses, 0, TurnMaxPasses},
		{"after the burst", 10 + TurnMaxPasses, TurnBurst, TurnPasses},
		{"tokens", 13, 0, 3},
		{"no tokens", NoTokens, 0, TurnMaxPasses},
		{"span over", NoTokens, TurnSpan, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newTurnsEnv(t, 0)
				h := e.formed(tc.last, nil)
				time.Sleep(tc.sleep)
				passes := 0
				for {
					lw, _ := e.tt.Join("l")
					if !e.tt.PassOn("l", h) {
						e.tt.Leave("l", lw)
						break
					}
					p := e.tt.Take(lw, nil)
					e.tt.Leave("l", lw)
					h = e.adopt(p)
					passes++
				}
				if passes != tc.want {
					t.Fatalf("%d passes, want %d", passes, tc.want)
				}
			})
		})
	}
}

// TestTurnsNoPassInDoubt: no pass is made while a message came for the owner
// field (the hold is then in doubt), the watch is not live, a connection
// error was seen since the hold's last confirmation, or less than half the
// lease is left.
func TestTurnsNoPassInDoubt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(e *turnsEnv, w *fakeWatch, h *Hold)
	}{
		{"message", func(_ *turnsEnv, w *fakeWatch, _ *Hold) { w.c <- struct{}{} }},
		{"watch down", func(_ *turnsEnv, w *fakeWatch, _ *Hold) { w.dead = true }},
		{"connection error", func(e *turnsEnv, _ *fakeWatch, _ *Hold) { e.c.lost.Add(1) }},
		{"lease low", func(_ *turnsEnv, _ *fakeWatch, _ *Hold) { time.Sleep(testLease/2 + time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newTurnsEnv(t, testLinger)
				w := newFakeWatch()
				h := e.formed(NoTokens, w)
				// Past the burst: the budget is not what refuses below.
				time.Sleep(TurnBurst)
				tc.spoil(e, w, h)
				lw, _ := e.tt.Join("l")
				if e.tt.PassOn("l", h) {
					t.Fatal("passed on a hold in doubt")
				}
				e.tt.Leave("l", lw)
				if e.tt.Park(e.lock, h) {
					t.Fatal("parked a hold in doubt")
				}
			})
		})
	}
}

// TestTurnsLeaveHandsOn: a waiter that leaves after it was passed the lock
// but before it took it returns the pass (its caller passes it on), and a
// leader that leaves makes the next waiter the leader.
func TestTurnsLeaveHandsOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, 0)
		h := e.formed(NoTokens, nil)
		a, _ := e.tt.Join("l")
		b, _ := e.tt.Join("l")
		if !e.tt.PassOn("l", h) {
			t.Fatal("pass refused")
		}
		p, _ := e.tt.Leave("l", a)
		if p == nil {
			t.Fatal("a waiter leaving with the lock passed to it did not hand it back")
		}
		// Its caller's handOn: a hold from the pass, released at once.
		h = e.adopt(p)
		if !e.tt.PassOn("l", h) || !ready(b) {
			t.Fatal("the lock handed on did not reach the next waiter")
		}
		p = e.tt.Take(b, nil)
		e.tt.Leave("l", b)
		// The holder lets go in Redis (no pass): the oldest waiter leads.
		h = e.adopt(p)
		c, _ := e.tt.Join("l")
		d, _ := e.tt.Join("l")
		e.tt.Dissolve("l", h)
		if !ready(c) || ready(d) {
			t.Fatal("the oldest waiter was not made the leader alone")
		}
		if p, _ := e.tt.Leave("l", c); p != nil {
			t.Fatal("a leader left with a pass")
		}
		if !ready(d) {
			t.Fatal("the leader left, and the next waiter was not made the leader")
		}
		e.tt.Leave("l", d)
		if e.tt.Active("l") {
			t.Fatal("state left behind")
		}
	})
}

// TestTurnsParkTakenAndLearnt: a contended turn's last release keeps the
// lock; the Client's next acquisition takes it, and the relock gap it took
// shortens the next linger (see TurnLinger).
func TestTurnsParkTakenAndLearnt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, testLinger)
		h := e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) || !e.tt.Parked("l") {
			t.Fatal("a contended release did not park")
		}
		gap := 100 * time.Microsecond
		time.Sleep(gap)
		p := e.tt.Unpark(e.lock)
		if p == nil || p.Owner != "o" {
			t.Fatalf("Unpark = %+v, want the parked lock", p)
		}
		h = e.adopt(p)
		if e.tt.Unpark(e.lock) != nil {
			t.Fatal("the parked lock was taken twice")
		}
		// The next park lingers TurnLinger(linger, gap) = linger/4 here.
		parkedAt := time.Now()
		if !e.tt.Park(e.lock, h) {
			t.Fatal("second park refused")
		}
		time.Sleep(TurnLinger(testLinger, gap) - time.Nanosecond)
		synctest.Wait()
		if len(e.lock.givenBack()) != 0 {
			t.Fatal("the linger ran out early")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := len(e.lock.givenBack()); got != 1 {
			t.Fatalf("%d give-backs %v after the park, want 1", got, time.Since(parkedAt))
		}
		if e.tt.Parked("l") || e.tt.Active("l") {
			t.Fatal("an expired park left state behind")
		}
	})
}

// TestTurnsParkMissedThenRelearnt: a linger that runs out unused stops the
// Client from parking that lock, until an acquisition comes within the
// linger of a release again.
func TestTurnsParkMissedThenRelearnt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, testLinger)
		h := e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) {
			t.Fatal("park refused")
		}
		time.Sleep(testLinger)
		synctest.Wait()
		if len(e.lock.givenBack()) != 1 {
			t.Fatal("the unused linger did not give the lock back")
		}
		// Slower than the linger: still no park.
		time.Sleep(testLinger)
		if e.tt.Unpark(e.lock) != nil {
			t.Fatal("took a lock given back")
		}
		h = e.formed(NoTokens, nil)
		if e.tt.Park(e.lock, h) {
			t.Fatal("parked again after a missed linger")
		}
		e.tt.Dissolve("l", h)
		e.tt.NoteReleased("l")
		// Quicker than the linger: it pays again.
		time.Sleep(testLinger / 2)
		e.tt.Unpark(e.lock)
		h = e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) {
			t.Fatal("no park after an acquisition came within the linger")
		}
	})
}

// TestTurnsParkCappedByLease: nothing renews a parked lock, so it is given
// back while a pass's margin of its lease is left, whatever the linger.
func TestTurnsParkCappedByLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 40 * time.Millisecond
		e := newTurnsEnv(t, 100*time.Millisecond)
		lw, _ := e.tt.Join("l")
		h := e.hold("o", 10, lease)
		e.tt.Form("l", h, NoTokens, lw, nil, true)
		e.tt.Leave("l", lw)
		time.Sleep(lease/2 - 5*time.Millisecond) // 5ms left above the margin
		if !e.tt.Park(e.lock, h) {
			t.Fatal("park refused")
		}
		time.Sleep(5*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if len(e.lock.givenBack()) != 0 {
			t.Fatal("given back before the lease called for it")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if len(e.lock.givenBack()) != 1 {
			t.Fatal("a parked lock outlived its margin")
		}
	})
}

// TestTurnsUnparkInDoubt: a parked lock that was put in doubt while parked
// is given back in Redis instead of taken.
func TestTurnsUnparkInDoubt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(e *turnsEnv, w *fakeWatch)
	}{
		{"message", func(_ *turnsEnv, w *fakeWatch) { w.c <- struct{}{} }},
		{"watch down", func(_ *turnsEnv, w *fakeWatch) { w.dead = true }},
		{"connection error", func(e *turnsEnv, _ *fakeWatch) { e.c.lost.Add(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newTurnsEnv(t, testLinger)
				w := newFakeWatch()
				h := e.formed(NoTokens, w)
				if !e.tt.Park(e.lock, h) {
					t.Fatal("park refused")
				}
				tc.spoil(e, w)
				if e.tt.Unpark(e.lock) != nil {
					t.Fatal("took a parked lock in doubt")
				}
				if len(e.lock.givenBack()) != 1 || e.tt.Active("l") {
					t.Fatal("a parked lock in doubt was not given back")
				}
			})
		})
	}
}

// TestTurnsClose: Close gives back what is parked, no park is made after it,
// and a pass in transit that cannot become a hold is given back too.
func TestTurnsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, testLinger)
		h := e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) {
			t.Fatal("park refused")
		}
		close(e.c.closed)
		e.tt.flush()
		if len(e.lock.givenBack()) != 1 || e.tt.Parked("l") {
			t.Fatal("Close did not give back the parked lock")
		}
		h = e.formed(NoTokens, nil)
		if e.tt.Park(e.lock, h) {
			t.Fatal("parked after Close")
		}
		lw, _ := e.tt.Join("l")
		next, _ := e.tt.Join("l")
		if !e.tt.PassOn("l", h) {
			t.Fatal("pass refused")
		}
		p := e.tt.Take(lw, nil)
		e.tt.Leave("l", lw)
		e.tt.AbortTransit(e.lock, p) // the new hold could not be registered
		if got := e.lock.givenBack(); len(got) != 2 || got[1] != p {
			t.Fatal("a pass in transit was not given back")
		}
		if !ready(next) {
			t.Fatal("after the abort no waiter leads")
		}
		e.tt.Leave("l", next)
		if e.tt.Active("l") {
			t.Fatal("state left behind")
		}
	})
}

// TestTurnsReservedPlace: a turn whose acquisitions took a parked lock ends
// with a release that reserves a place for the Client's next acquisition;
// one that comes within the linger takes it, one that does not come has it
// given up, and the guess is not repeated.
func TestTurnsReservedPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, testLinger)
		h := e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) {
			t.Fatal("park refused")
		}
		h = e.adopt(e.tt.Unpark(e.lock))
		l := e.tt.Reserve(e.lock, h)
		if l == nil || !l.Reserved() || e.tt.Successor("l", h) != nil {
			t.Fatal("no place reserved after a parked lock was taken")
		}
		// The release queued it: an acquisition that comes takes it.
		promo := &Promotion{Owner: "place"}
		if !e.tt.Promote("l", h, l, promo) {
			t.Fatal("the reservation was not promoted")
		}
		time.Sleep(testLinger / 2)
		lw, lead := e.tt.Join("l")
		if lead || !ready(lw) || e.tt.TakePromotion(lw) != promo {
			t.Fatal("the next acquisition did not take the reserved place")
		}
		e.tt.Leave("l", lw)
		if e.tt.Active("l") {
			t.Fatal("state left behind")
		}

		// Now the place is not taken.
		h = e.formed(NoTokens, nil)
		if !e.tt.Park(e.lock, h) {
			t.Fatal("park refused")
		}
		h = e.adopt(e.tt.Unpark(e.lock))
		l = e.tt.Reserve(e.lock, h)
		promo = &Promotion{Owner: "place2"}
		if l == nil || !e.tt.Promote("l", h, l, promo) {
			t.Fatal("no place reserved")
		}
		time.Sleep(testLinger)
		synctest.Wait()
		if got := e.lock.givenUp(); len(got) != 1 || got[0] != promo {
			t.Fatalf("places given up: %v, want the unused one", got)
		}
		if e.tt.Active("l") {
			t.Fatal("state left behind")
		}
		// The guess missed, and this turn took no parked lock: a release
		// in Redis reserves nothing now.
		h = e.formed(NoTokens, nil)
		if e.tt.Reserve(e.lock, h) != nil {
			t.Fatal("reserved again after a reservation went unused")
		}
	})
}

// TestTurnsSuccessorKept: a release that names a local waiter its successor
// and finds the lock kept for it (no one else queued) renews the turn, and
// the waiter is passed the lock; one that queued it promotes it.
func TestTurnsSuccessorKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTurnsEnv(t, 0)
		h := e.formed(10, nil) // no tokens left to pass
		lw, _ := e.tt.Join("l")
		if e.tt.PassOn("l", h) {
			t.Fatal("passed without tokens")
		}
		next := e.tt.Successor("l", h)
		if next != lw {
			t.Fatal("the waiting goroutine is not the successor")
		}
		if !e.tt.Keep("l", h, next, 11, 20) || !e.tt.PassOn("l", h) {
			t.Fatal("the kept lock was not passed on")
		}
		p := e.tt.Take(lw, nil)
		if p == nil || p.Token != 11 {
			t.Fatalf("pass %+v, want token 11", p)
		}
		e.tt.Leave("l", lw)
		h = e.adopt(p)
		lw, _ = e.tt.Join("l")
		promo := &Promotion{Owner: "queued"}
		if e.tt.Successor("l", h) != lw || !e.tt.Promote("l", h, lw, promo) {
			t.Fatal("no promotion")
		}
		if !ready(lw) || e.tt.TakePromotion(lw) != promo {
			t.Fatal("the successor did not get its place")
		}
		e.tt.Leave("l", lw)
		if e.tt.Active("l") {
			t.Fatal("state left behind")
		}
	})
}
