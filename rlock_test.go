package relock_test

// Integration tests of package rlock against a real Redis (a private
// redis-server, or $REDIS_ADDR; see internal/redistest). Every test uses its
// own key prefix, so they may share a server and run in parallel.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// testTimeout bounds every test's Redis calls and waits; the tests finish
// long before it unless something hangs.
const testTimeout = 20 * time.Second

// env is one test's Redis, key prefix and raw client for inspecting keys.
type env struct {
	t      *testing.T
	srv    *redistest.Server
	raw    rueidis.Client
	prefix string
	ctx    context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return &env{
		t:      t,
		srv:    srv,
		raw:    redistest.Client(t, srv),
		prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":"),
		ctx:    ctx,
	}
}

// client returns a new rlock Client on its own rueidis client, using the
// test's key prefix; both are closed at cleanup (the rlock Client first).
func (e *env) client(opts ...rlock.Option) *rlock.Client {
	e.t.Helper()
	rc := redistest.Client(e.t, e.srv)
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) lockKey(name string) string  { return e.prefix + ":{" + name + "}" }
func (e *env) fenceKey(name string) string { return e.lockKey(name) + ":fence" }
func (e *env) channel(name string) string  { return e.lockKey(name) + ":unlock" }

// grantChannels is the pattern of the grant channels of the lock's waiters
// (one per Client, see core.GrantChannel).
func (e *env) grantChannels(name string) string { return e.lockKey(name) + ":to:*" }

func (e *env) exists(key string) bool {
	e.t.Helper()
	n, err := e.raw.Do(e.ctx, e.raw.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

func (e *env) hgetall(key string) map[string]string {
	e.t.Helper()
	m, err := e.raw.Do(e.ctx, e.raw.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		e.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

// owners reads the owner fields of a lock hash (client id ':' number ->
// hold count), leaving out the holder's token and claim.
func (e *env) owners(key string) map[string]string {
	e.t.Helper()
	h := e.hgetall(key)
	for f := range h {
		if !strings.Contains(f, ":") {
			delete(h, f)
		}
	}
	return h
}

// keys lists every key under the test's prefix.
func (e *env) keys() []string {
	e.t.Helper()
	var all []string
	var cursor uint64
	for {
		entry, err := e.raw.Do(e.ctx, e.raw.B().Scan().Cursor(cursor).Match(e.prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			e.t.Fatalf("SCAN: %v", err)
		}
		all = append(all, entry.Elements...)
		if cursor = entry.Cursor; cursor == 0 {
			return all
		}
	}
}

// waitSubscribers polls until channel has at least n subscribers.
func (e *env) waitSubscribers(channel string, n int64) {
	e.t.Helper()
	waitFor(e.t, 5*time.Second, "subscribers on "+channel, func() bool {
		got, err := e.srv.Subscribers(e.ctx, channel)
		if err != nil {
			e.t.Fatalf("NUMSUB: %v", err)
		}
		return got >= n
	})
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// waitDone waits for ctx to be done, failing the test after timeout.
func waitDone(t *testing.T, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(timeout):
		t.Fatalf("%s: context not done after %v", what, timeout)
	}
}

func mustLock(t *testing.T, m *rlock.Mutex, ctx context.Context, opts ...rlock.LockOption) context.Context {
	t.Helper()
	lockCtx, err := m.Lock(ctx, opts...)
	if err != nil {
		t.Fatalf("Lock %s: %v", m.Name(), err)
	}
	return lockCtx
}

func mustUnlock(t *testing.T, m *rlock.Mutex, lockCtx context.Context) {
	t.Helper()
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock %s: %v", m.Name(), err)
	}
}

func holdCount(t *testing.T, m *rlock.Mutex, ctx context.Context) int {
	t.Helper()
	n, err := m.HoldCount(ctx)
	if err != nil {
		t.Fatalf("HoldCount: %v", err)
	}
	return n
}

func ttl(t *testing.T, m *rlock.Mutex, ctx context.Context) time.Duration {
	t.Helper()
	d, err := m.TTL(ctx)
	if err != nil {
		t.Fatalf("TTL: %v", err)
	}
	return d
}

func isLocked(t *testing.T, m *rlock.Mutex, ctx context.Context) bool {
	t.Helper()
	ok, err := m.IsLocked(ctx)
	if err != nil {
		t.Fatalf("IsLocked: %v", err)
	}
	return ok
}

func token(t *testing.T, m *rlock.Mutex, lockCtx context.Context) uint64 {
	t.Helper()
	tok, err := m.Token(lockCtx)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

// TestMutualExclusion has 3 Clients x 8 goroutines increment a Redis counter
// with GET then SET under the lock: any overlap of critical sections loses
// increments or shows up in the in-process occupancy counter.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		clients    = 3
		goroutines = 8
		iterations = 20
	)
	counterKey := e.prefix + ":counter"
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range clients {
		c := e.client()
		for range goroutines {
			wg.Go(func() {
				m := c.Mutex("counter")
				for i := range iterations {
					lockCtx, err := m.Lock(e.ctx)
					if err != nil {
						t.Errorf("Lock (iteration %d): %v", i, err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v, err := e.raw.Do(lockCtx, e.raw.B().Get().Key(counterKey).Build()).AsInt64()
					if err != nil && !rueidis.IsRedisNil(err) {
						t.Errorf("GET: %v", err)
					}
					if err := e.raw.Do(lockCtx, e.raw.B().Set().Key(counterKey).Value(strconv.FormatInt(v+1, 10)).Build()).Error(); err != nil {
						t.Errorf("SET: %v", err)
					}
					inside.Add(-1)
					if err := m.Unlock(lockCtx); err != nil {
						t.Errorf("Unlock (iteration %d): %v", i, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times a goroutine entered the critical section while another was inside", n)
	}
	got, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(counterKey).Build()).AsInt64()
	if err != nil {
		t.Fatalf("GET counter: %v", err)
	}
	if want := int64(clients * goroutines * iterations); got != want {
		t.Errorf("counter = %d, want %d (lost updates: critical sections overlapped)", got, want)
	}
	if e.exists(e.lockKey("counter")) {
		t.Errorf("lock key %s still exists after all unlocks", e.lockKey("counter"))
	}
}

// TestReentrancy locks three deep, checks that foreign owners can neither take
// nor release the lock, and unlocks level by level.
func TestReentrancy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c1, c2 := e.client(), e.client()
	const name = "reentrant"
	m := c1.Mutex(name)

	l1 := mustLock(t, m, e.ctx)
	if n := holdCount(t, m, l1); n != 1 {
		t.Fatalf("hold count after first Lock = %d, want 1", n)
	}
	l2 := mustLock(t, m, l1)
	if n := holdCount(t, m, l2); n != 2 {
		t.Fatalf("hold count after second Lock = %d, want 2", n)
	}
	l3, err := m.TryLock(l2) // TryLock re-enters too
	if err != nil {
		t.Fatalf("TryLock re-entry: %v", err)
	}
	if n := holdCount(t, m, l3); n != 3 {
		t.Fatalf("hold count after third Lock = %d, want 3", n)
	}
	t1, t3 := token(t, m, l1), token(t, m, l3)
	if t1 != t3 {
		t.Errorf("token changed on re-entry: %d then %d", t1, t3)
	}

	// Foreign owners: a context without the hold (same Client, same
	// goroutine), and another Client.
	if _, err := m.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock from a context without the hold: err = %v, want ErrLocked", err)
	}
	if _, err := m.Lock(e.ctx, rlock.WithWaitTimeout(50*time.Millisecond)); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("Lock with wait timeout from a context without the hold: err = %v, want ErrLocked", err)
	}
	if err := m.Unlock(e.ctx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock from a context without the hold: err = %v, want ErrNotHeld", err)
	}
	m2 := c2.Mutex(name)
	if _, err := m2.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock from another Client: err = %v, want ErrLocked", err)
	}
	if _, err := m2.TryLock(l3); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock from another Client with the holder's context: err = %v, want ErrLocked", err)
	}
	if err := m2.Unlock(l3); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock from another Client with the holder's context: err = %v, want ErrNotHeld", err)
	}
	if n := holdCount(t, m, l3); n != 3 {
		t.Errorf("hold count after foreign attempts = %d, want 3", n)
	}
	if n := holdCount(t, m2, l3); n != 0 {
		t.Errorf("another Client's hold count with the holder's context = %d, want 0", n)
	}
	if h := e.owners(e.lockKey(name)); len(h) != 1 || !slices.Contains(mapValues(h), "3") {
		t.Errorf("lock hash = %v, want one owner with count 3", h)
	}

	for want := 2; want >= 0; want-- {
		mustUnlock(t, m, l3)
		if n := holdCount(t, m, l1); n != want {
			t.Errorf("hold count after unlock = %d, want %d", n, want)
		}
		if want > 0 {
			if l1.Err() != nil {
				t.Fatalf("lock context ended with %d holds left: %v", want, context.Cause(l1))
			}
			if !isLocked(t, m, e.ctx) {
				t.Fatalf("not locked with %d holds left", want)
			}
		}
	}
	if l1.Err() == nil {
		t.Errorf("lock context not cancelled after the final Unlock")
	} else if cause := context.Cause(l1); !errors.Is(cause, rlock.ErrUnlocked) {
		t.Errorf("lock context cause = %v, want ErrUnlocked", cause)
	}
	if err := m.Unlock(l1); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("fourth Unlock: err = %v, want ErrNotHeld", err)
	}
	if e.exists(e.lockKey(name)) {
		t.Errorf("lock key still exists after the final Unlock")
	}
	// Now free for anyone.
	l := mustLock(t, m2, e.ctx, rlock.WithWaitTimeout(time.Second))
	mustUnlock(t, m2, l)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestUnlockAnnouncesNothingToNoOne subscribes to the unlock channel and
// checks that no Unlock of a Mutex no one waits for publishes: not the inner
// ones, not the final one (a Mutex's waiters queue in Redis and hear their
// grants on their own Client's channel; only a QuorumMutex's waiters listen
// here), and not a failed one. A marker published by the test orders the check
// without sleeping: Redis delivers a subscriber's messages in the order they
// were published.
func TestUnlockAnnouncesNothingToNoOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	const name = "publish"
	ch := e.channel(name)

	msgs := make(chan string, 16)
	sub := redistest.Client(t, e.srv)
	subCtx, stopSub := context.WithCancel(e.ctx)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		_ = sub.Receive(subCtx, sub.B().Subscribe().Channel(ch).Build(), func(msg rueidis.PubSubMessage) {
			msgs <- msg.Message
		})
	}()
	t.Cleanup(func() { stopSub(); <-subDone })
	e.waitSubscribers(ch, 1)

	marker := 0
	// next returns the messages received up to and including a fresh marker.
	next := func() []string {
		t.Helper()
		marker++
		mark := "marker-" + strconv.Itoa(marker)
		if err := e.raw.Do(e.ctx, e.raw.B().Publish().Channel(ch).Message(mark).Build()).Error(); err != nil {
			t.Fatalf("PUBLISH: %v", err)
		}
		var got []string
		for {
			select {
			case m := <-msgs:
				if m == mark {
					return got
				}
				got = append(got, m)
			case <-time.After(5 * time.Second):
				t.Fatalf("marker %q not received; got %q", mark, got)
			}
		}
	}

	m := c.Mutex(name)
	l := mustLock(t, m, e.ctx)
	l = mustLock(t, m, l)
	l = mustLock(t, m, l)
	if got := next(); len(got) != 0 {
		t.Errorf("messages after locking: %q, want none", got)
	}
	mustUnlock(t, m, l)
	mustUnlock(t, m, l)
	if got := next(); len(got) != 0 {
		t.Errorf("messages after inner unlocks: %q, want none", got)
	}
	mustUnlock(t, m, l)
	if got := next(); len(got) != 0 {
		t.Errorf("messages after the final unlock: %q, want none", got)
	}
	// A failed Unlock publishes nothing either.
	if err := m.Unlock(l); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("extra Unlock: err = %v, want ErrNotHeld", err)
	}
	if got := next(); len(got) != 0 {
		t.Errorf("messages after a failed unlock: %q, want none", got)
	}
}

// TestTTL checks that re-entry sets the lease again, and that watchdog holds
// get the watchdog timeout as their lease.
func TestTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("WithLease re-entry", func(t *testing.T) {
		m := e.client().Mutex("lease")
		const lease = 3 * time.Second
		l := mustLock(t, m, e.ctx, rlock.WithLease(lease))
		if d := ttl(t, m, e.ctx); d <= 2500*time.Millisecond || d > lease {
			t.Fatalf("TTL after Lock(WithLease(%v)) = %v", lease, d)
		}
		waitFor(t, 5*time.Second, "TTL below 2.5s", func() bool { return ttl(t, m, e.ctx) < 2500*time.Millisecond })
		l = mustLock(t, m, l, rlock.WithLease(lease))
		if d := ttl(t, m, e.ctx); d <= 2500*time.Millisecond || d > lease {
			t.Errorf("TTL after re-entry with WithLease(%v) = %v, want it set again", lease, d)
		}
		if n := holdCount(t, m, l); n != 2 {
			t.Errorf("hold count = %d, want 2", n)
		}
		mustUnlock(t, m, l)
		mustUnlock(t, m, l)
		if d := ttl(t, m, e.ctx); d != 0 {
			t.Errorf("TTL after the final Unlock = %v, want 0", d)
		}
	})

	t.Run("watchdog default", func(t *testing.T) {
		m := e.client().Mutex("default")
		l := mustLock(t, m, e.ctx)
		if d := ttl(t, m, e.ctx); d <= rlock.DefaultWatchdogTimeout-2*time.Second || d > rlock.DefaultWatchdogTimeout {
			t.Errorf("TTL of a watchdog hold = %v, want about %v", d, rlock.DefaultWatchdogTimeout)
		}
		// Re-entry with WithLease sets that lease instead.
		l = mustLock(t, m, l, rlock.WithLease(10*time.Second))
		if d := ttl(t, m, e.ctx); d <= 8*time.Second || d > 10*time.Second {
			t.Errorf("TTL after re-entry with WithLease(10s) = %v, want about 10s", d)
		}
		mustUnlock(t, m, l)
		mustUnlock(t, m, l)
	})

	t.Run("WithWatchdogTimeout", func(t *testing.T) {
		const wd = 5 * time.Second
		m := e.client(rlock.WithWatchdogTimeout(wd)).Mutex("custom")
		l := mustLock(t, m, e.ctx)
		if d := ttl(t, m, e.ctx); d <= wd-2*time.Second || d > wd {
			t.Errorf("TTL of a watchdog hold = %v, want about %v", d, wd)
		}
		mustUnlock(t, m, l)
	})
}

// TestExpiredLeaseLetsWaiterIn has a holder take a short fixed lease and never
// unlock; a waiter of another Client gets the lock once the lease ends.
func TestExpiredLeaseLetsWaiterIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name, lease = "expire", 500 * time.Millisecond
	holder, waiter := e.client().Mutex(name), e.client().Mutex(name)

	start := time.Now()
	hctx := mustLock(t, holder, e.ctx, rlock.WithLease(lease))
	holderDone := make(chan time.Time, 1)
	go func() {
		<-hctx.Done()
		holderDone <- time.Now()
	}()

	wctx := mustLock(t, waiter, e.ctx)
	got := time.Now()
	if elapsed := got.Sub(start); elapsed < 300*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("waiter acquired %v after the holder's Lock, want about the %v lease", elapsed, lease)
	}

	var doneAt time.Time
	select {
	case doneAt = <-holderDone:
	case <-time.After(3 * time.Second):
		t.Fatalf("holder's lock context not done after its lease ran out")
	}
	if cause := context.Cause(hctx); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("holder's lock context cause = %v, want ErrLeaseLost", cause)
	}
	// The holder must learn no later than Redis expires the key (generous slack
	// for scheduling).
	if late := doneAt.Sub(got); late > 100*time.Millisecond {
		t.Errorf("holder's lock context ended %v after the waiter acquired the lock", late)
	}

	// The stale holder cannot release the new holder's lock.
	if err := holder.Unlock(hctx); !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Errorf("stale holder's Unlock: err = %v, want ErrNotHeld and ErrLeaseLost", err)
	}
	if n := holdCount(t, waiter, wctx); n != 1 {
		t.Errorf("waiter's hold count after the stale Unlock = %d, want 1", n)
	}
	if wctx.Err() != nil {
		t.Errorf("waiter's lock context ended: %v", context.Cause(wctx))
	}
	mustUnlock(t, waiter, wctx)
}

// TestShortLease takes the shortest lease allowed (1ms), shorter than the
// round trip that grants it: the lock context must end with ErrLeaseLost at
// once, and the lock must be free again soon after. Not parallel, so that a
// failure (a data race under -race) is reported here.
func TestShortLease(t *testing.T) {
	e := newEnv(t)
	m := e.client().Mutex("short")
	other := e.client().Mutex("short")
	for i := range 20 {
		l, err := m.Lock(e.ctx, rlock.WithLease(time.Millisecond))
		if err != nil {
			t.Fatalf("Lock #%d with WithLease(1ms): %v", i, err)
		}
		waitDone(t, l, 2*time.Second, "lock context of a 1ms lease")
		if cause := context.Cause(l); !errors.Is(cause, rlock.ErrLeaseLost) {
			t.Fatalf("cause = %v, want ErrLeaseLost", cause)
		}
		if err := m.Unlock(l); !errors.Is(err, rlock.ErrNotHeld) {
			t.Errorf("Unlock of an expired hold: err = %v, want ErrNotHeld", err)
		}
	}
	ol := mustLock(t, other, e.ctx, rlock.WithWaitTimeout(2*time.Second))
	mustUnlock(t, other, ol)
}

// TestWatchdogKeepsLock holds a watchdog lock for several leases.
func TestWatchdogKeepsLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const wd = 300 * time.Millisecond
	m := e.client(rlock.WithWatchdogTimeout(wd)).Mutex("watchdog")
	other := e.client().Mutex("watchdog")

	l := mustLock(t, m, e.ctx)
	select {
	case <-l.Done():
		t.Fatalf("lock context ended while held: %v", context.Cause(l))
	case <-time.After(5 * wd): // the behaviour under test: outlive several leases
	}
	if !isLocked(t, m, e.ctx) {
		t.Fatalf("lock expired after %v although the watchdog should renew it", 5*wd)
	}
	if d := ttl(t, m, e.ctx); d <= 0 || d > wd {
		t.Errorf("TTL = %v, want in (0, %v]", d, wd)
	}
	if n := holdCount(t, m, l); n != 1 {
		t.Errorf("hold count = %d, want 1", n)
	}
	if _, err := other.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock by another Client: err = %v, want ErrLocked", err)
	}
	if l.Err() != nil {
		t.Fatalf("lock context ended: %v", context.Cause(l))
	}
	mustUnlock(t, m, l)
	if cause := context.Cause(l); !errors.Is(cause, rlock.ErrUnlocked) {
		t.Errorf("cause after Unlock = %v, want ErrUnlocked", cause)
	}
	if isLocked(t, m, e.ctx) {
		t.Errorf("still locked after Unlock")
	}
}

// TestLeaseLossCancelsLockContext deletes a held lock behind the holder's back.
func TestLeaseLossCancelsLockContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("short watchdog", func(t *testing.T) {
		t.Parallel()
		const name = "lost"
		m := e.client(rlock.WithWatchdogTimeout(300 * time.Millisecond)).Mutex(name)
		other := e.client().Mutex(name)

		l := mustLock(t, m, e.ctx)
		if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(e.lockKey(name)).Build()).Error(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		// Someone else takes the lock in the meantime.
		ol, err := other.TryLock(e.ctx)
		if err != nil {
			t.Fatalf("TryLock after DEL: %v", err)
		}
		waitDone(t, l, 2*time.Second, "lock context after the key was deleted")
		if cause := context.Cause(l); !errors.Is(cause, rlock.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
		err = m.Unlock(l)
		if !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
			t.Errorf("Unlock after lease loss: err = %v, want ErrNotHeld and ErrLeaseLost", err)
		}
		if n := holdCount(t, other, ol); n != 1 {
			t.Errorf("new holder's hold count = %d, want 1 (the stale holder must not release it)", n)
		}
		mustUnlock(t, other, ol)
	})

	// With a 3s watchdog the first renewal (after 1s) must notice the missing
	// key, well before the 3s lease would have run out on the holder's clock.
	t.Run("found by renewal", func(t *testing.T) {
		t.Parallel()
		const name = "lost-renewal"
		m := e.client(rlock.WithWatchdogTimeout(3 * time.Second)).Mutex(name)
		start := time.Now()
		l := mustLock(t, m, e.ctx)
		if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(e.lockKey(name)).Build()).Error(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		waitDone(t, l, 5*time.Second, "lock context after the key was deleted")
		if d := time.Since(start); d > 2500*time.Millisecond {
			t.Errorf("lease loss noticed after %v, want at the first renewal (about 1s)", d)
		}
		if cause := context.Cause(l); !errors.Is(cause, rlock.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
	})
}

// TestFencingTokens checks that tokens grow strictly with every acquisition,
// across Clients and under contention, and stay the same on re-entry.
func TestFencingTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name = "fenced"
	clients := []*rlock.Client{e.client(), e.client(), e.client()}

	var last uint64
	for i := range 6 {
		m := clients[i%len(clients)].Mutex(name)
		l := mustLock(t, m, e.ctx)
		tok := token(t, m, l)
		if tok <= last {
			t.Errorf("holder %d got token %d after %d", i, tok, last)
		}
		last = tok
		l2 := mustLock(t, m, l)
		if tok2 := token(t, m, l2); tok2 != tok {
			t.Errorf("re-entry changed the token from %d to %d", tok, tok2)
		}
		mustUnlock(t, m, l2)
		if tok3 := token(t, m, l); tok3 != tok {
			t.Errorf("token after an inner Unlock = %d, want %d", tok3, tok)
		}
		mustUnlock(t, m, l)
	}
	fence, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(e.fenceKey(name)).Build()).AsUint64()
	if err != nil {
		t.Fatalf("GET fence: %v", err)
	}
	if fence != last {
		t.Errorf("fence counter = %d, want the last token %d", fence, last)
	}

	// Concurrent holders: the tokens seen inside the critical section, in the
	// order the lock was acquired, must increase strictly.
	var (
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	const perGoroutine = 5
	for _, c := range clients {
		for range 4 {
			wg.Go(func() {
				m := c.Mutex(name)
				for range perGoroutine {
					l, err := m.Lock(e.ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					tok, err := m.Token(l)
					if err != nil {
						t.Errorf("Token: %v", err)
					}
					mu.Lock()
					tokens = append(tokens, tok)
					mu.Unlock()
					if err := m.Unlock(l); err != nil {
						t.Errorf("Unlock: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if want := len(clients) * 4 * perGoroutine; len(tokens) != want {
		t.Fatalf("collected %d tokens, want %d", len(tokens), want)
	}
	for i, tok := range tokens {
		if tok <= last {
			t.Errorf("token #%d = %d, not above the previous %d (tokens in acquisition order: %v)", i, tok, last, tokens)
			break
		}
		last = tok
	}
	sorted := slices.Clone(tokens)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(tokens) {
		t.Errorf("duplicate tokens: %v", tokens)
	}
}

// TestLockCancellation checks that a waiting Lock gives up on cancellation and
// on its wait timeout, leaving nothing held.
func TestLockCancellation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name = "cancel"
	holder := e.client().Mutex(name)
	waiter := e.client().Mutex(name)
	third := e.client().Mutex(name)

	hl := mustLock(t, holder, e.ctx)

	// Cancelled while waiting.
	cctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(cctx)
		if err == nil {
			_ = waiter.Unlock(l)
		}
		result <- err
	}()
	e.waitSubscribers(e.grantChannels(name), 1) // the waiter is waiting
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Lock cancelled while waiting: err = %v, want context.Canceled", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Lock did not return after its context was cancelled")
	}

	// Wait timeout.
	start := time.Now()
	_, err := waiter.Lock(e.ctx, rlock.WithWaitTimeout(300*time.Millisecond))
	elapsed := time.Since(start)
	if !errors.Is(err, rlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with an expired wait timeout: err = %v, want ErrLocked and context.DeadlineExceeded", err)
	}
	if elapsed < 250*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("Lock with WithWaitTimeout(300ms) returned after %v", elapsed)
	}
	if e.ctx.Err() != nil {
		t.Fatalf("test context ended")
	}

	// The holder releases: neither failed waiter keeps the lock. (A waiter
	// gives up its place in the background; if the release handed it the
	// lock first, giving up passes the lock on.)
	mustUnlock(t, holder, hl)
	waitFor(t, 3*time.Second, "lock free after the holder's Unlock with only failed waiters behind it", func() bool {
		return !isLocked(t, holder, e.ctx)
	})
	tl := mustLock(t, third, e.ctx, rlock.WithWaitTimeout(2*time.Second))
	if h := e.owners(e.lockKey(name)); len(h) != 1 {
		t.Errorf("lock hash owners = %v, want only the third Client's hold", h)
	}
	mustUnlock(t, third, tl)
	if e.exists(e.lockKey(name)) {
		t.Errorf("lock key exists after the last Unlock")
	}

	// A context already cancelled: no lock, and none left behind in Redis.
	done, cancelDone := context.WithCancel(e.ctx)
	cancelDone()
	if _, err := waiter.Lock(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context: err = %v, want context.Canceled", err)
	}
	waitFor(t, 3*time.Second, "no lock after Lock with a cancelled context", func() bool {
		return !e.exists(e.lockKey(name))
	})
}

// TestBadInput checks argument validation; none of it may touch Redis.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	ctx := e.ctx

	badNames := map[string]string{
		"empty":     "",
		"open":      "a{b",
		"close":     "a}b",
		"tag":       "{x}",
		"too long":  strings.Repeat("x", rlock.MaxNameLength+1),
		"not UTF-8": "a\xff\xfeb",
		"control":   "a\nb",
	}
	for desc, name := range badNames {
		m := c.Mutex(name)
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, rlock.ErrInvalidName) {
				t.Errorf("%s with a bad name (%s): err = %v, want ErrInvalidName", op, desc, err)
			}
		}
		_, err := m.Lock(ctx)
		check("Lock", err)
		_, err = m.Lock(ctx, rlock.WithWaitTimeout(time.Second))
		check("Lock with wait timeout", err)
		_, err = m.TryLock(ctx)
		check("TryLock", err)
		check("Unlock", m.Unlock(ctx))
		_, err = m.IsLocked(ctx)
		check("IsLocked", err)
		_, err = m.TTL(ctx)
		check("TTL", err)
		_, err = m.HoldCount(ctx)
		check("HoldCount", err)
		_, err = m.Token(ctx)
		check("Token", err)
		_, err = m.ForceUnlock(ctx)
		check("ForceUnlock", err)
	}
	// Exactly at the length limit is fine.
	if _, err := c.Mutex(strings.Repeat("é", rlock.MaxNameLength/2)).IsLocked(ctx); err != nil {
		t.Errorf("IsLocked with a %d-byte name: %v", rlock.MaxNameLength, err)
	}

	m := c.Mutex("valid")
	for _, opt := range []struct {
		desc string
		opt  rlock.LockOption
	}{
		{"WithLease(0)", rlock.WithLease(0)},
		{"WithLease(-1s)", rlock.WithLease(-time.Second)},
		{"WithLease(1us)", rlock.WithLease(time.Microsecond)},
		{"WithWaitTimeout(-1s)", rlock.WithWaitTimeout(-time.Second)},
	} {
		if _, err := m.Lock(ctx, opt.opt); !errors.Is(err, rlock.ErrInvalidLease) {
			t.Errorf("Lock(%s): err = %v, want ErrInvalidLease", opt.desc, err)
		}
		if _, err := m.TryLock(ctx, opt.opt); !errors.Is(err, rlock.ErrInvalidLease) {
			t.Errorf("TryLock(%s): err = %v, want ErrInvalidLease", opt.desc, err)
		}
	}
	if err := m.Unlock(context.Background()); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock(context.Background()): err = %v, want ErrNotHeld", err)
	}
	if _, err := m.Token(context.Background()); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Token(context.Background()): err = %v, want ErrNotHeld", err)
	}
	if n, err := m.HoldCount(context.Background()); n != 0 || err != nil {
		t.Errorf("HoldCount(context.Background()) = %d, %v; want 0, nil", n, err)
	}

	rc := redistest.Client(t, e.srv)
	for _, bad := range []struct {
		desc string
		opt  rlock.Option
		want error
	}{
		{"WithWatchdogTimeout(0)", rlock.WithWatchdogTimeout(0), rlock.ErrInvalidLease},
		{"WithWatchdogTimeout(-1s)", rlock.WithWatchdogTimeout(-time.Second), rlock.ErrInvalidLease},
		{"WithKeyPrefix with a brace", rlock.WithKeyPrefix(e.prefix + "{"), rlock.ErrInvalidName},
	} {
		if c, err := rlock.New(rc, bad.opt); !errors.Is(err, bad.want) {
			t.Errorf("New(%s): err = %v, want %v", bad.desc, err, bad.want)
			if c != nil {
				_ = c.Close()
			}
		}
	}
	if _, err := rlock.New(nil); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Errorf("New(nil): err = %v, want ErrInvalidOption", err)
	}

	if keys := e.keys(); len(keys) != 0 {
		t.Errorf("bad input left keys in Redis: %v", keys)
	}
}

// TestUnlockOtherMutex passes one Mutex's lock context to another Mutex.
func TestUnlockOtherMutex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	a, b := c.Mutex("a"), c.Mutex("b")
	la := mustLock(t, a, e.ctx)
	if err := b.Unlock(la); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock of b with a's lock context: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Token(la); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Token of b with a's lock context: err = %v, want ErrNotHeld", err)
	}
	if n := holdCount(t, a, la); n != 1 {
		t.Errorf("a's hold count = %d, want 1", n)
	}
	if e.exists(e.lockKey("b")) {
		t.Errorf("b's key was created")
	}
	// Holds of different locks nest in one context.
	lb := mustLock(t, b, la)
	if n := holdCount(t, b, lb); n != 1 {
		t.Errorf("b's hold count = %d, want 1 (a different lock is a first acquisition, not a re-entry)", n)
	}
	if n := holdCount(t, a, lb); n != 1 {
		t.Errorf("a's hold count through b's lock context = %d, want 1", n)
	}
	mustUnlock(t, b, lb)
	mustUnlock(t, a, la)
	if e.exists(e.lockKey("a")) || e.exists(e.lockKey("b")) {
		t.Errorf("lock keys left after unlocking both")
	}
}

// TestClosedClient checks use after Close.
func TestClosedClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	holderClient := e.client()
	held := holderClient.Mutex("held")
	hl := mustLock(t, held, e.ctx)

	// A waiter blocked in Lock returns ErrClosed when its Client closes.
	blocked := c.Mutex("held")
	result := make(chan error, 1)
	go func() {
		_, err := blocked.Lock(e.ctx)
		result <- err
	}()
	e.waitSubscribers(e.grantChannels("held"), 1)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, rlock.ErrClosed) {
			t.Errorf("waiting Lock after Close: err = %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("waiting Lock did not return after Close")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	m := c.Mutex("after-close")
	if _, err := m.Lock(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("Lock after Close: err = %v, want ErrClosed", err)
	}
	if _, err := m.TryLock(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("TryLock after Close: err = %v, want ErrClosed", err)
	}
	if _, err := m.IsLocked(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("IsLocked after Close: err = %v, want ErrClosed", err)
	}
	if _, err := m.TTL(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("TTL after Close: err = %v, want ErrClosed", err)
	}
	if _, err := m.ForceUnlock(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("ForceUnlock after Close: err = %v, want ErrClosed", err)
	}
	if _, err := m.HoldCount(e.ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("HoldCount after Close: err = %v, want ErrClosed", err)
	}
	if e.exists(e.lockKey("after-close")) {
		t.Errorf("Lock after Close created the key")
	}

	// Closing a Client with a live hold ends its lock context; the key stays
	// until its lease runs out.
	if err := holderClient.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitDone(t, hl, time.Second, "lock context after Close")
	if cause := context.Cause(hl); !errors.Is(cause, rlock.ErrLeaseLost) || !errors.Is(cause, rlock.ErrClosed) {
		t.Errorf("cause after Close = %v, want ErrLeaseLost and ErrClosed", cause)
	}
	if err := held.Unlock(hl); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock after Close: err = %v, want ErrNotHeld", err)
	}
}

// TestForceUnlock checks that ForceUnlock frees the lock and wakes a waiter at
// once, and the values of IsLocked and TTL.
func TestForceUnlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name = "force"
	holder := e.client().Mutex(name) // default 30s watchdog: the lease does not run out here
	waiter := e.client().Mutex(name)
	admin := e.client().Mutex(name)

	if isLocked(t, admin, e.ctx) {
		t.Fatalf("locked before any Lock")
	}
	if d := ttl(t, admin, e.ctx); d != 0 {
		t.Errorf("TTL when unlocked = %v, want 0", d)
	}
	if ok, err := admin.ForceUnlock(e.ctx); ok || err != nil {
		t.Errorf("ForceUnlock when unlocked = %v, %v; want false, nil", ok, err)
	}

	hl := mustLock(t, holder, e.ctx)
	if !isLocked(t, admin, e.ctx) {
		t.Errorf("IsLocked = false while held")
	}
	if d := ttl(t, admin, e.ctx); d <= 25*time.Second || d > rlock.DefaultWatchdogTimeout {
		t.Errorf("TTL while held = %v, want about %v", d, rlock.DefaultWatchdogTimeout)
	}

	type lockResult struct {
		ctx context.Context
		err error
		at  time.Time
	}
	result := make(chan lockResult, 1)
	go func() {
		l, err := waiter.Lock(e.ctx)
		result <- lockResult{l, err, time.Now()}
	}()
	e.waitSubscribers(e.grantChannels(name), 1)
	start := time.Now()
	ok, err := admin.ForceUnlock(e.ctx)
	if !ok || err != nil {
		t.Fatalf("ForceUnlock while held = %v, %v; want true, nil", ok, err)
	}
	var wl context.Context
	select {
	case r := <-result:
		if r.err != nil {
			t.Fatalf("waiter's Lock: %v", r.err)
		}
		wl = r.ctx
		if d := r.at.Sub(start); d > 3*time.Second {
			t.Errorf("waiter acquired %v after ForceUnlock, want promptly", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter not woken by ForceUnlock (the holder's lease is 30s)")
	}

	// The former holder finds out at Unlock, without harming the new holder.
	if err := holder.Unlock(hl); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("former holder's Unlock: err = %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(hl); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("former holder's lock context cause = %v, want ErrLeaseLost", cause)
	}
	if n := holdCount(t, waiter, wl); n != 1 {
		t.Errorf("new holder's hold count = %d, want 1", n)
	}
	mustUnlock(t, waiter, wl)
	if isLocked(t, admin, e.ctx) {
		t.Errorf("locked after the final Unlock")
	}

	// A key without expiry (set by hand): TTL is negative.
	if err := e.raw.Do(e.ctx, e.raw.B().Hset().Key(e.lockKey(name)).FieldValue().FieldValue("someone", "1").Build()).Error(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if d := ttl(t, admin, e.ctx); d >= 0 {
		t.Errorf("TTL of a key without expiry = %v, want negative", d)
	}
	if !isLocked(t, admin, e.ctx) {
		t.Errorf("IsLocked = false for a hand-set lock")
	}
	if ok, err := admin.ForceUnlock(e.ctx); !ok || err != nil {
		t.Errorf("ForceUnlock of a hand-set lock = %v, %v; want true, nil", ok, err)
	}
	if d := ttl(t, admin, e.ctx); d != 0 {
		t.Errorf("TTL after ForceUnlock = %v, want 0", d)
	}
}
