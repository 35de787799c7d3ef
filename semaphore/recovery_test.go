package semaphore_test

// Tests of how a semaphore recovers from faults: a Redis restart, lost
// replies, an outage, crashed processes and a failed release.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// proxied returns a Client whose every connection goes through a fault
// proxy in front of the test's server, with the proxy.
func (e *env) proxied(opts ...rlock.Option) (*rlock.Client, *faultproxy.Proxy) {
	e.t.Helper()
	p, err := faultproxy.Start(e.srv.Addr())
	if err != nil {
		e.t.Fatalf("faultproxy: %v", err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	rc := redistest.Client(e.t, e.srv, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} })
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c, p
}

// queue returns the ids queued on semaphore name, in order.
func (e *env) queue(name string) []string {
	e.t.Helper()
	ids, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.base(name)+":queue").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		e.t.Fatalf("ZRANGE queue: %v", err)
	}
	return ids
}

// deadline returns the waiter deadline of id on semaphore name (0 if none).
func (e *env) deadline(name, id string) float64 {
	e.t.Helper()
	f, err := e.raw.Do(e.ctx, e.raw.B().Zscore().Key(e.base(name)+":waiters").Member(id).Build()).AsFloat64()
	if rueidis.IsRedisNil(err) {
		return 0
	}
	if err != nil {
		e.t.Fatalf("ZSCORE waiters: %v", err)
	}
	return f
}

// TestLimitSurvivesRestart restarts Redis (without persistence): a Lock, and
// a Semaphore with WithLimit, re-establish their limit and work on, where
// they used to fail with ErrNoLimit for ever.
func TestLimitSurvivesRestart(t *testing.T) {
	e := ownedEnv(t)
	c := e.client()
	l := semaphore.NewLock(c, "lock")
	s := semaphore.New(c, "pool", semaphore.WithLimit(2))
	use := func(when string) {
		t.Helper()
		lockCtx, err := l.Lock(e.ctx)
		if err != nil {
			t.Fatalf("%s: Lock: %v", when, err)
		}
		if err := l.Unlock(lockCtx); err != nil {
			t.Fatalf("%s: Unlock: %v", when, err)
		}
		mustRelease(t, s, mustAcquire(t, s, e.ctx, 2))
		if n, err := s.Limit(e.ctx); err != nil || n != 2 {
			t.Errorf("%s: Limit = %d, %v, want 2", when, n, err)
		}
	}
	use("before the restart")
	if err := e.srv.Restart(e.ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	use("after the restart")
}

// TestWithLimitChangeTakesEffect rolls out a new WithLimit: while the old
// limit is in Redis it wins (TrySetLimit cannot change it either), and once
// Redis has lost it (here by a restart without persistence) the first process
// to use the semaphore establishes its own, which the others then use.
func TestWithLimitChangeTakesEffect(t *testing.T) {
	e := ownedEnv(t)
	const name = "rollout"
	old := semaphore.New(e.client(), name, semaphore.WithLimit(4))
	mustRelease(t, old, mustAcquire(t, old, e.ctx, 4))
	updated := semaphore.New(e.client(), name, semaphore.WithLimit(8))
	if n, err := updated.Limit(e.ctx); err != nil || n != 4 {
		t.Errorf("Limit seen by the WithLimit(8) semaphore = %d, %v, want the 4 in Redis", n, err)
	}
	if _, err := updated.TryAcquire(e.ctx, 5); !errors.Is(err, semaphore.ErrExceedsLimit) {
		t.Errorf("TryAcquire(5) under the limit of 4: err = %v, want ErrExceedsLimit", err)
	}
	if ok, err := semaphore.New(e.client(), name).TrySetLimit(e.ctx, 8); ok || err != nil {
		t.Errorf("TrySetLimit(8) over the 4 in Redis = %v, %v, want false, nil", ok, err)
	}

	if err := e.srv.Restart(e.ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// The updated process comes first after the restart: its limit is set,
	// without anyone calling TrySetLimit or SetLimit.
	p := mustAcquire(t, updated, e.ctx, 8)
	if n, err := old.Limit(e.ctx); err != nil || n != 8 {
		t.Errorf("Limit seen by the WithLimit(4) semaphore after the restart = %d, %v, want 8", n, err)
	}
	mustRelease(t, updated, p)
}

// TestWithLimitExistingWins configures two different limits: the one in Redis
// wins, and a limit set by hand overrides both and stays.
func TestWithLimitExistingWins(t *testing.T) {
	e := newEnv(t)
	const name = "mixed"
	s4 := semaphore.New(e.client(), name, semaphore.WithLimit(4))
	s2 := semaphore.New(e.client(), name, semaphore.WithLimit(2))
	p := mustAcquire(t, s4, e.ctx, 1)
	if n, err := s2.Limit(e.ctx); err != nil || n != 4 {
		t.Errorf("Limit seen by the WithLimit(2) semaphore = %d, %v, want the 4 already set", n, err)
	}
	q := mustAcquire(t, s2, e.ctx, 3) // fits only under the limit of 4
	mustRelease(t, s2, q)
	mustRelease(t, s4, p)
	if err := s2.SetLimit(e.ctx, 3); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	if n, err := s4.Limit(e.ctx); err != nil || n != 3 {
		t.Errorf("Limit after SetLimit(3) = %d, %v, want 3", n, err)
	}
	if ttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(e.base(name)).Build()).AsInt64(); err != nil || ttl != -1 {
		t.Errorf("PTTL of the state hash after SetLimit = %d, %v, want -1 (permanent)", ttl, err)
	}
	if _, err := semaphore.New(e.client(), name, semaphore.WithLimit(-1)).Limit(e.ctx); !errors.Is(err, semaphore.ErrInvalidCount) {
		t.Errorf("WithLimit(-1): err = %v, want ErrInvalidCount", err)
	}
}

// TestGivenUpWaiterLeavesAtOnce has a waiter time out or be cancelled while it
// keeps free permits from others (it wants more than are free): as soon as its
// Acquire returns, TryAcquire and Drain get the free permits.
func TestGivenUpWaiterLeavesAtOnce(t *testing.T) {
	e := newEnv(t)
	const name = "leave"
	holder := e.sem(e.client(), name, 2)
	waiter := e.sem(e.client(), name, 2)
	other := e.sem(e.client(), name, 2)
	h := mustAcquire(t, holder, e.ctx, 1)
	for i := range 10 {
		ctx, cancel := context.WithCancel(e.ctx)
		if i%2 == 0 {
			_, err := waiter.Acquire(ctx, 2, semaphore.WithWaitTimeout(50*time.Millisecond))
			if !errors.Is(err, semaphore.ErrNoPermits) {
				t.Fatalf("round %d: timed-out Acquire: err = %v, want ErrNoPermits", i, err)
			}
		} else {
			ch := goAcquire(waiter, ctx, 2)
			e.waitQueued(holder, 1)
			cancel()
			if r := receiveErr(t, ch, 5*time.Second, "cancelled waiter"); !errors.Is(r.err, context.Canceled) {
				t.Fatalf("round %d: cancelled Acquire: err = %v, want context.Canceled", i, r.err)
			}
		}
		cancel()
		if i%4 < 2 {
			p, err := other.TryAcquire(e.ctx, 1)
			if err != nil {
				t.Fatalf("round %d: TryAcquire right after the waiter gave up: %v (its entry is still queued?)", i, err)
			}
			mustRelease(t, other, p)
		} else {
			p, n, err := other.Drain(e.ctx)
			if err != nil || n != 1 {
				t.Fatalf("round %d: Drain right after the waiter gave up = %d, %v, want 1 (its entry is still queued?)", i, n, err)
			}
			mustRelease(t, other, p)
		}
	}
	mustRelease(t, holder, h)
}

// TestLostReplyKeepsPlace loses the reply to the head waiter's re-check: it
// must keep its place (same id, same arrival number), so that a smaller
// request behind it does not take the permits kept for it.
func TestLostReplyKeepsPlace(t *testing.T) {
	e := newEnv(t)
	const name = "lost-reply"
	holder := e.sem(e.client(), name, 3)
	pc, proxy := e.proxied()
	big := e.sem(pc, name, 3)
	small := e.sem(e.client(), name, 3)
	var held []context.Context
	for range 3 {
		held = append(held, mustAcquire(t, holder, e.ctx, 1))
	}
	bigCh := goAcquire(big, e.ctx, 3)
	e.waitQueued(holder, 1)
	head := e.queue(name)[0]
	smallCh := goAcquire(small, e.ctx, 1)
	e.waitQueued(holder, 2)

	// Slow the proxy down and cut its connections: the big waiter re-checks
	// after its pub/sub reconnect. Once that re-check has run in Redis (its
	// deadline moved), cut again before the delayed reply comes back.
	before := e.deadline(name, head)
	proxy.SetLatency(700 * time.Millisecond)
	proxy.Cut()
	waitFor(t, 10*time.Second, "the big waiter's re-check to run in Redis", func() bool { return e.deadline(name, head) > before })
	lost := e.deadline(name, head)
	proxy.SetLatency(0)
	proxy.Cut()

	waitFor(t, 10*time.Second, "the big waiter to re-check again, in its place", func() bool {
		q := e.queue(name)
		return len(q) == 2 && q[0] == head && e.deadline(name, head) > lost
	}, func() string { return "queue " + strings.Join(e.queue(name), ", ") + ", head was " + head })

	mustRelease(t, holder, held[0])
	stillBlocked(t, smallCh, 300*time.Millisecond, "small request behind the big head")
	mustRelease(t, holder, held[1])
	mustRelease(t, holder, held[2])
	r := receive(t, bigCh, prompt, "big waiter")
	mustRelease(t, big, r.ctx)
	r = receive(t, smallCh, prompt, "small waiter")
	mustRelease(t, small, r.ctx)
}

// TestIdleKeysExpire crashes a process holding permits (renewed, and with a
// fixed lease) and waiting in the queue: with nobody left to clean up, every
// key of the semaphore expires by itself shortly after the leases run out.
func TestIdleKeysExpire(t *testing.T) {
	e := newEnv(t)
	const name = "idle"
	const watchdog = 300 * time.Millisecond
	c, proxy := e.proxied(rlock.WithWatchdogTimeout(watchdog))
	s := semaphore.New(c, name, semaphore.WithLimit(3))
	// Two permits in one lease, so that the counts hash exists too.
	redistest.KeepHeld(t, mustAcquire(t, s, e.ctx, 2))
	redistest.KeepHeld(t, mustAcquire(t, s, e.ctx, 1, semaphore.WithLease(300*time.Millisecond)))
	waitCtx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch := goAcquire(s, waitCtx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return len(e.queue(name)) == 1 })
	if keys := e.keys(); len(keys) != 5 {
		t.Errorf("keys of a semaphore with holders and a waiter = %q, want 5 (state, permits, counts, queue, waiters)", keys)
	}

	// The process loses Redis for good; its waiter gives up but cannot tell Redis.
	proxy.Block(true)
	proxy.Cut()
	crashed := time.Now()
	cancel()
	receiveErr(t, ch, 5*time.Second, "waiter of the crashed process")

	var left []string
	waitFor(t, 10*time.Second, "every key of the semaphore gone", func() bool {
		left = e.keys()
		return len(left) == 0
	}, func() string { return "left: " + strings.Join(left, ", ") })
	t.Logf("all keys gone %v after the crash", time.Since(crashed).Round(time.Millisecond))
}

// TestOutageCleanupsBounded stops Redis while several Acquires wait: their
// failed re-checks must not pile up background clean-ups, and when Redis is
// back every waiter is served.
func TestOutageCleanupsBounded(t *testing.T) {
	e := ownedEnv(t)
	const (
		name    = "outage"
		waiters = 5
	)
	holder := semaphore.New(e.client(), name, semaphore.WithLimit(1))
	s := semaphore.New(e.client(rlock.WithWatchdogTimeout(900*time.Millisecond)), name, semaphore.WithLimit(1))
	redistest.KeepHeld(t, mustAcquire(t, holder, e.ctx, 1))
	done := make(chan error, waiters)
	for range waiters {
		go func() {
			p, err := s.Acquire(e.ctx, 1)
			if err == nil {
				err = s.Release(p)
			}
			done <- err
		}()
	}
	// The waiters of one Client queue in Redis as one (see turns.go): one
	// re-checks there, the others wait in the Client.
	waitFor(t, 5*time.Second, "the Client's waiters queued", func() bool { return len(e.queue(name)) == 1 && semaphore.LocalWaiters(s) == waiters })
	baseline := len(moduleGoroutines())

	if err := e.srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	peak := 0
	tick := time.NewTicker(50 * time.Millisecond)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-tick.C {
		peak = max(peak, len(moduleGoroutines()))
	}
	tick.Stop()
	t.Logf("goroutines of the module: %d before the outage, at most %d during it", baseline, peak)
	if peak > baseline+waiters {
		t.Errorf("goroutines of the module rose from %d to %d during the outage: clean-ups pile up", baseline, peak)
	}
	if err := e.srv.Restart(e.ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	for range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("waiter after the outage: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("waiters not all served 15s after Redis came back")
		}
	}
}

// TestFailedReleaseGivesUp makes Release fail for good (the command is
// denied): the permits must stop being renewed, the permit context end with
// a cause saying so, and the error tell when they are free; once commands are
// allowed again, the permits are free by then.
func TestFailedReleaseGivesUp(t *testing.T) {
	e := ownedEnv(t)
	const name = "denied"
	c, acl := e.aclClient(rlock.WithWatchdogTimeout(600*time.Millisecond), rlock.WithUnlockTimeout(500*time.Millisecond))
	s := semaphore.New(c, name, semaphore.WithLimit(1))
	observer := semaphore.New(e.client(), name, semaphore.WithLimit(1))
	p := mustAcquire(t, s, e.ctx, 1)

	acl("-evalsha", "-eval", "-fcall")
	err := s.Release(p)
	acl("+@all")
	var ae *semaphore.AbandonError
	if !errors.Is(err, semaphore.ErrAbandoned) || !errors.As(err, &ae) {
		t.Fatalf("denied Release: err = %v, want an AbandonError", err)
	}
	t.Logf("denied Release: %v", err)
	if n := strings.Count(err.Error(), "semaphore"); n != 1 {
		t.Errorf("error %q says \"semaphore\" %d times, want once", err, n)
	}
	if !strings.Contains(err.Error(), name) {
		t.Errorf("error %q does not name the semaphore", err)
	}
	if until := time.Until(ae.FreeBy); until <= 0 || until > 2*time.Second {
		t.Errorf("FreeBy in %v, want within the 600ms lease and a renewal", until)
	}
	waitDone(t, p, time.Second, "permit context of the given-up permits")
	if cause := context.Cause(p); !errors.Is(cause, semaphore.ErrLeaseLost) || !errors.Is(cause, semaphore.ErrAbandoned) {
		t.Errorf("permit context cause = %v, want ErrLeaseLost and ErrAbandoned", cause)
	}
	e.waitState(observer, time.Until(ae.FreeBy)+2*time.Second, "the given-up permit free", func(st semaphore.State) bool { return st.Held == 0 })
}

// TestAcquireIdempotentPerID replays an attempt whose reply was lost: the
// retry under the same id reports the permits already taken, and takes no more.
func TestAcquireIdempotentPerID(t *testing.T) {
	e := newEnv(t)
	s := e.sem(e.client(), "replay", 3)
	for attempt := range 2 {
		status, n, err := semaphore.AcquireScript(e.ctx, s, "replayed-id", 2)
		if err != nil || status != 1 || n != 2 {
			t.Errorf("attempt %d = %d, %d, %v, want acquired 2", attempt, status, n, err)
		}
		if st := e.state(s); st.Held != 2 {
			t.Errorf("after attempt %d: state %s, want Held 2", attempt, stateString(st))
		}
	}
}

// With Redis down, an Acquire that gives up says Redis could not be reached,
// not that no permits were free.
func TestRedisDownIsNotNoPermits(t *testing.T) {
	e := ownedEnv(t)
	c := e.client()
	s := e.sem(c, "down", 1)
	mustRelease(t, s, mustAcquire(t, s, e.ctx, 1)) // warm: scripts loaded, connections up
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(time.Second))
	if errors.Is(err, semaphore.ErrNoPermits) || !errors.Is(err, semaphore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with Redis down: %v; want ErrUnavailable and DeadlineExceeded, not ErrNoPermits", err)
	}
}
