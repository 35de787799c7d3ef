package rlock_test

// Nothing permanent per lock name: once a lock or semaphore is idle, every key
// of it expires within the idle bound the README states, and fencing tokens
// keep rising across the expiry of the fencing counter.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Short timeouts, so that the idle bound is a few seconds: the fencing
// counter is kept max(lease, 1s) past its last token, a waiter's place two
// watchdog timeouts (2s at least) past its last re-check, a release's latch
// the unlock timeout plus 1s.
const (
	idleWatchdog = 300 * time.Millisecond
	idleUnlock   = 200 * time.Millisecond
	// idleBound is the README's bound for these settings: a waiter's place
	// lapses its planned re-check (4/5 of the watchdog timeout) plus
	// max(lease, 2s) after its last check, the longest of the parts.
	idleBound = idleWatchdog*4/5 + 2*time.Second
	// semIdleBound is the semaphore's (see its package documentation): its
	// state outlives the last lease by 3s (the idle time and two slacks of
	// 1s each).
	semIdleBound = idleWatchdog + 3*time.Second
)

func idleOptions() []rlock.Option {
	return []rlock.Option{rlock.WithWatchdogTimeout(idleWatchdog), rlock.WithUnlockTimeout(idleUnlock), rlock.WithClaimWindow(rlock.MinClaimWindow)}
}

// keysUnder lists every key under the test's prefix.
func (e *ftEnv) keysUnder() []string {
	e.t.Helper()
	var all []string
	var cursor uint64
	for {
		sc, err := e.raw.Do(e.ctx, e.raw.B().Scan().Cursor(cursor).Match(e.prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, sc.Elements...)
		if cursor = sc.Cursor; cursor == 0 {
			slices.Sort(all)
			return all
		}
	}
}

// queuedOn waits until n owners are queued for the Mutex name.
func (e *ftEnv) queuedOn(name string, n int64) {
	e.t.Helper()
	e.eventually(ftPatience, fmt.Sprintf("%d waiters queued for %s", n, name), func() bool {
		got, err := e.raw.Do(e.ctx, e.raw.B().Zcard().Key(e.lockKey(name)+":queue").Build()).AsInt64()
		return err == nil && got == n
	})
}

// allExpire fails the test for every key under the prefix that has no TTL.
func (e *ftEnv) allExpire(what string) {
	e.t.Helper()
	snap, err := e.srv.Snapshot(e.ctx, e.prefix+":*")
	if err != nil {
		e.t.Fatal(err)
	}
	for k, st := range snap {
		if !st.HasExpiry {
			e.t.Errorf("%s: key %s has no expiry", what, k)
		}
	}
}

// goneWithin waits until no key is left under the prefix, and fails when that
// takes longer than bound (plus ftPatience, for a loaded machine) after since.
func (e *ftEnv) goneWithin(since time.Time, bound time.Duration, what string) time.Duration {
	e.t.Helper()
	deadline := since.Add(bound + ftPatience)
	var last []string
	for {
		left := e.keysUnder()
		if len(left) == 0 {
			took := time.Since(since)
			e.t.Logf("%s: every key gone %v after the last use (bound %v); the last to go: %q", what, took.Round(time.Millisecond), bound, last)
			return took
		}
		last = left
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: keys left %v after the last use (bound %v): %q", what, time.Since(since).Round(time.Millisecond), bound, left)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// TestIdleKeysGone uses each kind of lock the way a service does, contended
// and not, with a waiter whose process dies in the queue and one that gives
// up: right after, every key left has a TTL, and once the locks are idle no
// key of them remains.
func TestIdleKeysGone(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(idleOptions()...), e.client(idleOptions()...)

	// A Mutex locked once, uncontended.
	l := ftLock(t, e.ctx, a.Mutex("plain"))
	mustUnlockFT(t, a.Mutex("plain"), l)

	// Contended Mutexes (plain and FIFO): b queues behind a and is handed
	// the lock, and a waiter gives up. Then the process of a holder and of a
	// waiter queued behind it dies (neither can reach Redis again), and no
	// one uses the lock after them: its queue is left to lapse.
	for _, fair := range []bool{false, true} {
		name := "contended-" + strconv.FormatBool(fair)
		mutex := func(c *rlock.Client, name string) *rlock.Mutex {
			if fair {
				return c.FairMutex(name)
			}
			return c.Mutex(name)
		}
		l := ftLock(t, e.ctx, mutex(a, name))
		got := make(chan error, 1)
		go func() {
			l, err := mutex(b, name).Lock(e.ctx)
			if err == nil {
				err = mutex(b, name).Unlock(l)
			}
			got <- err
		}()
		e.queuedOn(name, 1)
		_, err := mutex(e.client(idleOptions()...), name).Lock(e.ctx, rlock.WithWaitTimeout(50*time.Millisecond))
		if !errors.Is(err, rlock.ErrLocked) {
			t.Fatalf("%s: Lock with a short wait timeout: %v, want ErrLocked", name, err)
		}
		mustUnlockFT(t, mutex(a, name), l)
		if err := <-got; err != nil {
			t.Fatalf("%s: the waiter: %v", name, err)
		}

		name = "crashed-" + strconv.FormatBool(fair)
		p, err := faultproxy.Start(e.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		viaProxy := func() *rlock.Client {
			return e.clientOn(redistest.Client(t, e.srv, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} }), idleOptions()...)
		}
		holder, waiter := viaProxy(), viaProxy()
		redistest.KeepHeld(t, ftLock(t, e.ctx, mutex(holder, name))) // the holder crashes: its hold is never released
		waitCtx, stop := context.WithCancel(e.ctx)
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			if l, err := mutex(waiter, name).Lock(waitCtx); err == nil {
				_ = mutex(waiter, name).Unlock(l)
			}
		}()
		e.queuedOn(name, 1)
		p.Block(true)
		p.Cut()
		stop()
		<-waited
	}

	// An RWMutex: a writer, readers queued behind it, a re-entered read.
	w := rwLock(t, e.ctx, a.RWMutex("rw"), true)
	read := make(chan error, 1)
	go func() {
		l, err := b.RWMutex("rw").RLock(e.ctx)
		if err == nil {
			_, err = b.RWMutex("rw").RLock(l)
		}
		for i := 0; err == nil && i < 2; i++ {
			err = b.RWMutex("rw").RUnlock(l)
		}
		read <- err
	}()
	e.rwQueuedIs("rw", 1)
	rwUnlock(t, a.RWMutex("rw"), w, true)
	if err := <-read; err != nil {
		t.Fatal(err)
	}

	// A MultiLock over two names.
	ml := a.MultiLock("m1", "m2")
	lm, err := ml.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(lm); err != nil {
		t.Fatal(err)
	}

	// A semaphore with a configured limit, contended.
	sa, sb := semaphore.New(a, "sem", semaphore.WithLimit(1)), semaphore.New(b, "sem", semaphore.WithLimit(1))
	pa, err := sa.Acquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan error, 1)
	go func() {
		pb, err := sb.Acquire(e.ctx, 1)
		if err == nil {
			err = sb.Release(pb)
		}
		acquired <- err
	}()
	e.eventually(ftPatience, "the semaphore's waiter queued", func() bool { return e.exists(e.lockKey("sem") + ":sem:queue") })
	if err := sa.Release(pa); err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	last := time.Now()

	left := e.keysUnder()
	for _, part := range []string{"{plain}:fence", "{contended-false}:fence", "{contended-true}:fence", "{rw}:rw:fence", "{m1}:fence", "{sem}:sem"} {
		if !slices.ContainsFunc(left, func(k string) bool { return strings.HasSuffix(k, part) }) {
			t.Errorf("no key ending in %s right after use (keys: %q): the test does not look where the locks are", part, left)
		}
	}
	e.allExpire("right after use")
	e.goneWithin(last, max(idleBound, semIdleBound), "every kind")
}

// TestIdleTokensRiseAcrossExpiry lets the fencing counter of a Mutex and an
// RWMutex expire, for real, after an ordinary hold, after a burst of
// contended acquisitions (each reserving a block of tokens for its Client's
// goroutines), and after the counter ran ahead of the clock (as it does when
// tokens are reserved faster than one per microsecond): the next token is
// above every one before.
func TestIdleTokensRiseAcrossExpiry(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(idleOptions()...), e.client(idleOptions()...)
	const name = "tokens"
	m := a.Mutex(name)
	fence := e.lockKey(name) + ":fence"

	token := func(c *rlock.Client) uint64 {
		t.Helper()
		l := ftLock(t, e.ctx, c.Mutex(name))
		tok, err := c.Mutex(name).Token(l)
		if err != nil {
			t.Fatal(err)
		}
		mustUnlockFT(t, c.Mutex(name), l)
		return tok
	}
	expired := func(key string) {
		t.Helper()
		pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if pttl < 0 {
			t.Fatalf("%s: PTTL %d right after use, want an expiry", key, pttl)
		}
		e.eventually(time.Duration(pttl)*time.Millisecond+ftPatience, key+" expired", func() bool { return !e.exists(key) })
	}

	// An ordinary hold.
	t1 := token(a)
	expired(fence)
	t2 := token(a)
	if t2 <= t1 {
		t.Fatalf("token %d after the counter expired, %d before: tokens must rise", t2, t1)
	}

	// A burst: goroutines of two Clients take turns, contended acquisitions
	// reserve blocks of tokens and pass the lock on locally.
	var mu sync.Mutex
	highest := t2
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			for range 50 {
				l, err := c.Mutex(name).Lock(e.ctx)
				if err != nil {
					errs <- err
					return
				}
				tok, _ := c.Mutex(name).Token(l)
				mu.Lock()
				highest = max(highest, tok)
				mu.Unlock()
				if err := c.Mutex(name).Unlock(l); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	counter, err := e.raw.Do(e.ctx, e.raw.B().Get().Key(fence).Build()).AsUint64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("burst: highest token %d, counter %d (%d above the first token of the burst)", highest, counter, counter-t2)
	expired(fence)
	if t3 := token(a); t3 <= counter {
		t.Fatalf("token %d after the counter expired, counter %d before: tokens must rise", t3, counter)
	}

	// A counter running 3s ahead of the clock: as 3,000,000 tokens reserved
	// at once would leave it (46,000 contended acquisitions of 65), with the
	// expiry such a reservation gives it. The next acquisition must keep the
	// counter until the clock has passed it.
	const ahead = 3 * time.Second
	l := ftLock(t, e.ctx, m)
	now := time.Now()
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(fence).Value(strconv.FormatInt(now.Add(ahead).UnixMicro(), 10)).
		Pxat(now.Add(ahead+time.Second)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	mustUnlockFT(t, m, l)
	t4 := token(b)
	pttl, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(fence).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if keep := time.Duration(pttl) * time.Millisecond; keep < ahead {
		t.Fatalf("a counter %v ahead of the clock expires in %v: a counter made afresh from the clock would start below it", ahead, keep)
	}
	expired(fence)
	if t5 := token(a); t5 <= t4 {
		t.Fatalf("token %d after a counter ahead of the clock expired, %d before: tokens must rise", t5, t4)
	}

	// An RWMutex's counter likewise.
	rw := a.RWMutex(name)
	w := rwLock(t, e.ctx, rw, true)
	r1, err := rw.Token(w)
	if err != nil {
		t.Fatal(err)
	}
	rwUnlock(t, rw, w, true)
	expired(e.rwKey(name, ":fence"))
	w = rwLock(t, e.ctx, rw, true)
	r2, err := rw.Token(w)
	if err != nil {
		t.Fatal(err)
	}
	rwUnlock(t, rw, w, true)
	if r2 <= r1 {
		t.Fatalf("RWMutex token %d after the counter expired, %d before: tokens must rise", r2, r1)
	}
}

// A queued attempt that finds the fencing counter gone (it expired during a
// long hold) reports the server clock in microseconds as the counter: a
// hand-off message read later is stale unless its tokens are above it, and
// every token issued from then on is.
func TestIdleMissingCounterSeenAsClock(t *testing.T) {
	e := ftNewEnv(t)
	const name = "seen"
	m := e.client().Mutex(name)
	if _, err := e.srv.Do(e.ctx, "HSET", e.lockKey(name), "holder:1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Do(e.ctx, "PEXPIRE", e.lockKey(name), "10000"); err != nil {
		t.Fatal(err)
	}
	before := uint64(time.Now().Add(-time.Minute).UnixMicro())
	status, fence, err := rlock.QueuedFence(e.ctx, m, "other:1", 10*time.Second)
	if err != nil || status != 0 {
		t.Fatalf("acquire = %d, %v; want not acquired", status, err)
	}
	if fence < before {
		t.Fatalf("fence %d with the counter missing: want the server clock in microseconds (above %d)", fence, before)
	}
	if e.exists(e.lockKey(name) + ":fence") {
		t.Fatal("a failed attempt created the fencing counter")
	}
	if _, err := e.srv.Do(e.ctx, "DEL", e.lockKey(name)); err != nil {
		t.Fatal(err)
	}
	l := ftLock(t, e.ctx, m)
	tok, err := m.Token(l)
	if err != nil {
		t.Fatal(err)
	}
	mustUnlockFT(t, m, l)
	if tok <= fence {
		t.Fatalf("token %d after a failed attempt saw %d: a hand-off made after it would read as stale", tok, fence)
	}
}
