package rlock_test

// Fault-injection tests of the Mutex against a Redis server each test owns:
// lost unlock messages, killed pub/sub connections, a restarted server,
// cancelled waiters and lost replies. They assert both outcomes (everyone
// gets the lock) and costs (no polling, bounded delays).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
)

// ftPatience bounds waits for things that should happen promptly. It is
// generous so that a loaded machine under -race does not fail the tests; the
// bounds that matter for a feature are stated where they are checked.
const ftPatience = 15 * time.Second

// ftEnv is one fault test's private Redis and key prefix.
type ftEnv struct {
	t      *testing.T
	ctx    context.Context
	srv    *redistest.Server
	raw    rueidis.Client
	prefix string
}

func ftNewEnv(t *testing.T) *ftEnv {
	t.Helper()
	srv := redistest.Owned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &ftEnv{
		t:      t,
		ctx:    ctx,
		srv:    srv,
		raw:    redistest.Client(t, srv),
		prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":"),
	}
}

// client returns an rlock Client on its own rueidis client (so on its own
// pub/sub connection), closed at cleanup.
func (e *ftEnv) client(opts ...rlock.Option) *rlock.Client {
	e.t.Helper()
	return e.clientOn(redistest.Client(e.t, e.srv), opts...)
}

func (e *ftEnv) clientOn(rc rueidis.Client, opts ...rlock.Option) *rlock.Client {
	e.t.Helper()
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *ftEnv) lockKey(name string) string { return e.prefix + ":{" + name + "}" }

// channel is the pattern of the grant channels of the lock's waiters (one per
// Client, see core.GrantChannel).
func (e *ftEnv) channel(name string) string { return e.lockKey(name) + ":to:*" }

// scripts is how many EVALSHA and EVAL commands the server has run.
func (e *ftEnv) scripts() int64 {
	e.t.Helper()
	st, err := e.srv.CommandStats(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return redistest.ScriptCalls(st)
}

func (e *ftEnv) stat(cmd string) int64 {
	e.t.Helper()
	st, err := e.srv.CommandStats(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st[cmd]
}

func (e *ftEnv) numSub(ch string) int64 {
	e.t.Helper()
	n, err := e.srv.Subscribers(e.ctx, ch)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *ftEnv) exists(key string) bool {
	e.t.Helper()
	n, err := e.raw.Do(e.ctx, e.raw.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n == 1
}

// sortedSetMembers lists "key member" for every member of every sorted set
// under the test's prefix.
func (e *ftEnv) sortedSetMembers() []string {
	e.t.Helper()
	var out []string
	var cursor uint64
	for {
		sc, err := e.raw.Do(e.ctx, e.raw.B().Scan().Cursor(cursor).Match(e.prefix+"*").Count(1000).Type("zset").Build()).AsScanEntry()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range sc.Elements {
			members, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				e.t.Fatal(err)
			}
			for _, m := range members {
				out = append(out, k+" "+m)
			}
		}
		if cursor = sc.Cursor; cursor == 0 {
			return out
		}
	}
}

// queuedIs waits until n distinct owners are queued (members of the lock's
// sorted sets) under the test's prefix.
func (e *ftEnv) queuedIs(n int) {
	e.t.Helper()
	var got map[string]bool
	e.eventually(ftPatience, fmt.Sprintf("%d waiters queued in Redis", n), func() bool {
		got = map[string]bool{}
		for _, km := range e.sortedSetMembers() {
			_, member, _ := strings.Cut(km, " ")
			got[member] = true
		}
		return len(got) == n
	})
}

// eventually polls cond until it holds or timeout passes.
func (e *ftEnv) eventually(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func (e *ftEnv) numSubIs(ch string, want int64) {
	e.t.Helper()
	deadline := time.Now().Add(ftPatience)
	for {
		got := e.numSub(ch)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("NUMSUB %s = %d after %v, want %d", ch, got, ftPatience, want)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// quiet waits until the server stops running scripts (every waiter is asleep)
// and returns the script count. A spinning waiter never lets it settle.
func (e *ftEnv) quiet() int64 {
	e.t.Helper()
	const settle = 300 * time.Millisecond
	deadline := time.Now().Add(ftPatience)
	last, since := e.scripts(), time.Now()
	for time.Since(since) < settle {
		if time.Now().After(deadline) {
			e.t.Fatalf("Redis kept running scripts for %v (now %d): waiters are polling", ftPatience, last)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
		if n := e.scripts(); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

// subscriberIDs lists the connections that hold subscriptions (CLIENT LIST
// flag P). CLIENT KILL TYPE pubsub would miss RESP3 subscribers, which Redis
// classifies as "normal".
func (e *ftEnv) subscriberIDs(clientName string) []string {
	e.t.Helper()
	msg, err := e.srv.Do(e.ctx, "CLIENT", "LIST")
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := msg.ToString()
	if err != nil {
		e.t.Fatal(err)
	}
	// RESP3 sends CLIENT LIST as a verbatim string, prefixed with its format.
	list = strings.TrimPrefix(list, "txt:")
	var ids []string
	for line := range strings.Lines(list) {
		var id, flags, cname string
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			// A RESP3 reply is a verbatim string: "txt:" opens its first line.
			switch strings.TrimPrefix(k, "txt:") {
			case "id":
				id = v
			case "flags":
				flags = v
			case "name":
				cname = v
			}
		}
		if id != "" && strings.Contains(flags, "P") && (clientName == "" || cname == clientName) {
			ids = append(ids, id)
		}
	}
	return ids
}

// ftWaiters runs Lock calls in goroutines; each one unlocks at once and
// records the outcome. It also checks mutual exclusion.
type ftWaiters struct {
	wg       sync.WaitGroup
	inside   atomic.Int32
	overlap  atomic.Int32
	acquired atomic.Int32
	errs     chan error
	times    chan time.Time
}

func ftNewWaiters(n int) *ftWaiters {
	return &ftWaiters{errs: make(chan error, n), times: make(chan time.Time, n)}
}

func (w *ftWaiters) start(ctx context.Context, m *rlock.Mutex, opts ...rlock.LockOption) {
	w.wg.Go(func() {
		lc, err := m.Lock(ctx, opts...)
		if err != nil {
			w.errs <- err
			return
		}
		w.times <- time.Now()
		if w.inside.Add(1) > 1 {
			w.overlap.Add(1)
		}
		w.acquired.Add(1)
		w.inside.Add(-1)
		if err := m.Unlock(lc); err != nil {
			w.errs <- fmt.Errorf("unlock: %w", err)
		}
	})
}

// wait waits for every Lock call to return, or fails after timeout.
func (w *ftWaiters) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("only %d waiters acquired the lock within %v", w.acquired.Load(), timeout)
	}
	close(w.errs)
	for err := range w.errs {
		t.Errorf("waiter: %v", err)
	}
	if n := w.overlap.Load(); n > 0 {
		t.Errorf("the lock was held by two waiters at once %d time(s)", n)
	}
}

func ftWaitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(ftPatience)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines still running, baseline %d:\n%s", n, baseline, buf)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// 1. Waiting costs nothing while the lock stays held: no polling, whatever
// the number of waiters and Clients.
func TestFaultNoSpinningWhileWaiting(t *testing.T) {
	e := ftNewEnv(t)
	const name, clients, perClient = "nospin", 3, 10
	holder := e.client(rlock.WithWatchdogTimeout(30 * time.Second))
	hold, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}

	ws := ftNewWaiters(clients * perClient)
	for range clients {
		m := e.client().Mutex(name)
		for range perClient {
			ws.start(e.ctx, m)
		}
	}
	// One subscription per Client, then silence.
	e.numSubIs(e.channel(name), clients)
	before := e.quiet()

	const window = 3 * time.Second
	select {
	case <-time.After(window): // the observation window
	case err := <-ws.errs:
		t.Fatalf("a waiter returned while the lock was held: %v", err)
	}
	if n := ws.acquired.Load(); n != 0 {
		t.Fatalf("%d waiters acquired a lock that was held", n)
	}
	if spent := e.scripts() - before; spent > 10 {
		t.Fatalf("%d waiters ran %d scripts in %v while the lock stayed held: they poll", clients*perClient, spent, window)
	}

	if err := holder.Mutex(name).Unlock(hold); err != nil {
		t.Fatal(err)
	}
	ws.wait(t, ftPatience)
	if n := ws.acquired.Load(); n != clients*perClient {
		t.Fatalf("%d of %d waiters acquired the lock", n, clients*perClient)
	}
}

// 2. An unlock message that never comes (the holder's lease simply runs out)
// costs a waiter at most the holder's remaining lease, and the waiter sleeps
// through it rather than polling.
func TestFaultLostUnlockCostsAtMostTheLease(t *testing.T) {
	const lease = time.Second

	t.Run("one waiter", func(t *testing.T) {
		e := ftNewEnv(t)
		const name = "expiring"
		holder := e.client()
		waiter := e.client()
		start := time.Now()
		hold, err := holder.Mutex(name).Lock(e.ctx, rlock.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		before := e.scripts()
		lc, err := waiter.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		spent := e.scripts() - before
		if took < lease-100*time.Millisecond {
			t.Fatalf("acquired %v after a %v lease was taken: before it ran out", took, lease)
		}
		if took > 3*time.Second {
			t.Fatalf("acquired %v after a %v lease was taken, want about the lease", took, lease)
		}
		if spent > 5 {
			t.Fatalf("the waiter ran %d scripts while waiting %v: it polls instead of sleeping until the lease ends", spent, took)
		}
		// The holder learns of the loss on its own (no renewals for WithLease).
		select {
		case <-hold.Done():
			if !errors.Is(context.Cause(hold), rlock.ErrLeaseLost) {
				t.Fatalf("holder's lock context ended with %v, want ErrLeaseLost", context.Cause(hold))
			}
		case <-time.After(ftPatience):
			t.Fatal("holder's lock context not cancelled after its lease ran out")
		}
		if err := waiter.Mutex(name).Unlock(lc); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("queued waiter behind an expiring hold", func(t *testing.T) {
		// Waiters A (Client X) and B (Client Y) queue in that order behind a
		// holder. The hold vanishes without a message (as when a lease runs
		// out) and B happens to re-check first: the lock is free but reserved
		// for A, so B wakes A and goes back to sleep. A takes the lock with a
		// 1s lease and lets it run out (no unlock, no message). B's wait must
		// then be bounded by A's lease, not by the 2/5 x 30s re-check period.
		e := ftNewEnv(t)
		const name = "expiring-queue"
		holder := e.client()
		held, err := holder.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		redistest.KeepHeld(t, held)
		x := e.client()
		y := e.clientOn(redistest.Client(t, e.srv, func(o *rueidis.ClientOption) { o.ClientName = "waiter-y" }))

		first := make(chan error, 1)
		go func() {
			lc, err := x.Mutex(name).Lock(e.ctx, rlock.WithLease(lease)) // never unlocked
			redistest.KeepHeld(t, lc)
			first <- err
		}()
		e.queuedIs(1)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		second := make(chan error, 1)
		go func() {
			_, err := y.Mutex(name).Lock(ctx, rlock.WithLease(lease))
			second <- err
		}()
		e.queuedIs(2)
		e.quiet()

		// The hold vanishes without a message; only B's Client re-checks (its
		// pub/sub connection is re-established, which wakes its waiters).
		if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(e.lockKey(name)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		ids := e.subscriberIDs("waiter-y")
		if len(ids) != 1 {
			t.Fatalf("found %d subscriber connections of Client Y, want 1", len(ids))
		}
		if _, err := e.srv.Do(e.ctx, "CLIENT", "KILL", "ID", ids[0]); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-first:
			if err != nil {
				t.Fatalf("first waiter: %v", err)
			}
		case <-time.After(ftPatience):
			t.Fatal("first waiter not woken when B found the lock free and reserved for it")
		}
		acquired := time.Now()

		// One lease for A, plus a generous margin; far below the 12s re-check.
		const bound = lease + 3*time.Second
		select {
		case err := <-second:
			took := time.Since(acquired).Round(time.Millisecond)
			if err != nil {
				t.Fatalf("second waiter: %v", err)
			}
			if took > bound {
				t.Fatalf("second waiter acquired %v after A took the lock with a %v lease that ran out without a message, want at most %v", took, lease, bound)
			}
			t.Logf("second waiter acquired %v after A took the lock", took)
		case <-time.After(bound):
			t.Fatalf("second waiter still waiting %v after A took the lock with a %v lease that ran out without a message: "+
				"its wait is not bounded by the holder's lease", bound, lease)
		}
	})
}

// 3. Messages published while the pub/sub connection is down are lost; the
// reconnect must wake every waiter to re-check, instead of leaving them asleep
// for the holder's lease.
func TestFaultPubSubKilledWhileWaiting(t *testing.T) {
	e := ftNewEnv(t)
	const name, n = "pubsubkill", 10
	holder := e.client() // watchdog: the lease is 30s and renewed
	hold, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiters := e.client(rlock.WithPubSub(pubsub.WithLinger(0)))
	ws := ftNewWaiters(n)
	for range n {
		ws.start(e.ctx, waiters.Mutex(name))
	}
	e.numSubIs(e.channel(name), 1)
	e.quiet() // every waiter is asleep, having seen a 30s lease

	ids := e.subscriberIDs("")
	if len(ids) != 1 {
		t.Fatalf("found %d subscriber connections, want 1", len(ids))
	}
	// Kill the subscriber and free the lock without a message, atomically, so
	// that the reconnect cannot come in between.
	err = e.raw.Dedicated(func(dc rueidis.DedicatedClient) error {
		res := dc.DoMulti(e.ctx,
			dc.B().Multi().Build(),
			dc.B().Arbitrary("CLIENT", "KILL").Args("ID", ids[0]).Build(),
			dc.B().Del().Key(e.lockKey(name)).Build(),
			dc.B().Exec().Build())
		replies, err := res[3].ToArray()
		if err != nil {
			return err
		}
		for _, r := range replies {
			if err := r.Error(); err != nil {
				return err
			}
		}
		if n, _ := replies[1].AsInt64(); n != 1 {
			return fmt.Errorf("DEL removed %d keys", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("MULTI CLIENT KILL + DEL: %v", err)
	}
	killed := time.Now()

	// Far sooner than the 30s lease the waiters saw.
	ws.wait(t, 5*time.Second)
	if n := ws.acquired.Load(); n != 10 {
		t.Fatalf("%d of 10 waiters acquired the lock", n)
	}
	t.Logf("all waiters acquired within %v of the kill", time.Since(killed).Round(time.Millisecond))
	e.numSubIs(e.channel(name), 0)

	// The former holder's lock is gone: its Unlock must not touch anything.
	if err := holder.Mutex(name).Unlock(hold); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Unlock by the holder whose key was deleted: %v, want ErrNotHeld", err)
	}
}

// 4. A restart wipes the lock: waiters recover (new connections, scripts
// loaded again, subscriptions restored) well before a watchdog lease, and the
// holder learns that it lost the lock.
func TestFaultRedisRestartWhileWaiting(t *testing.T) {
	e := ftNewEnv(t)
	const name, n = "restart", 5
	// The holder's watchdog renews every ~333ms, so it notices quickly.
	holder := e.client(rlock.WithWatchdogTimeout(time.Second))
	// Issue a few hundred tokens first, more than the waiters below can use
	// up after the restart, so that a counter restarting from zero shows.
	for range 300 {
		lc, err := holder.Mutex(name).Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Mutex(name).Unlock(lc); err != nil {
			t.Fatal(err)
		}
	}
	hold, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokenBefore, err := holder.Mutex(name).Token(hold)
	if err != nil {
		t.Fatal(err)
	}
	// The waiters' own holds get the default 30s watchdog lease.
	waiters := e.client()
	ws := ftNewWaiters(n)
	for range n {
		ws.start(e.ctx, waiters.Mutex(name))
	}
	e.numSubIs(e.channel(name), 1)
	// Every waiter is past its first attempt and waiting (the Client's
	// leader queued in Redis, the others in the Client behind it), so the
	// restart hits waiters, not Lock calls on their way in.
	e.queuedIs(1)
	e.eventually(ftPatience, fmt.Sprintf("%d waiters in the Client", n), func() bool {
		return rlock.WaitingInClient(waiters, name) == n
	})

	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	select {
	case <-hold.Done():
		if !errors.Is(context.Cause(hold), rlock.ErrLeaseLost) {
			t.Fatalf("holder's lock context ended with %v, want ErrLeaseLost", context.Cause(hold))
		}
	case <-time.After(ftPatience):
		t.Fatal("holder's lock context not cancelled after the restart wiped its lock")
	}
	ws.wait(t, 10*time.Second)
	if got := ws.acquired.Load(); got != n {
		t.Fatalf("%d of %d waiters acquired the lock", got, n)
	}
	t.Logf("all waiters acquired within %v of the restart", time.Since(restarted).Round(time.Millisecond))
	if err := holder.Mutex(name).Unlock(hold); !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Fatalf("Unlock of the lost hold: %v, want ErrNotHeld and ErrLeaseLost", err)
	}

	// The restart lost the fencing counter, yet tokens keep rising: a fenced
	// resource that saw the old holder's token accepts the new holders.
	after, err := waiters.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokenAfter, err := waiters.Mutex(name).Token(after)
	if err != nil {
		t.Fatal(err)
	}
	if tokenAfter <= tokenBefore {
		t.Fatalf("token after the restart %d, want above the token issued before it, %d", tokenAfter, tokenBefore)
	}
	if err := waiters.Mutex(name).Unlock(after); err != nil {
		t.Fatal(err)
	}
}

// 5. Waiters whose context ends leave no subscription, no goroutine and no
// trace in Redis.
func TestFaultCancelledWaitersLeaveNothing(t *testing.T) {
	e := ftNewEnv(t)
	const name, n = "cancelled", 20
	baseline := runtime.NumGoroutine()

	rc1, err := e.srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	rc2, err := e.srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	holder, err := rlock.New(rc1, rlock.WithKeyPrefix(e.prefix))
	if err != nil {
		t.Fatal(err)
	}
	waiters, err := rlock.New(rc2, rlock.WithKeyPrefix(e.prefix), rlock.WithPubSub(pubsub.WithLinger(0)))
	if err != nil {
		t.Fatal(err)
	}
	hold, err := holder.Mutex(name).Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(e.ctx)
	errs := make(chan error, n)
	for range n {
		go func() {
			lc, err := waiters.Mutex(name).Lock(ctx)
			if err == nil {
				_ = waiters.Mutex(name).Unlock(lc)
				err = errors.New("acquired a held lock")
			}
			errs <- err
		}()
	}
	e.numSubIs(e.channel(name), 1)
	e.quiet()
	cancel()
	for i := range n {
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("waiter: %v, want context.Canceled", err)
			}
		case <-time.After(ftPatience):
			t.Fatalf("only %d of %d cancelled waiters returned", i, n)
		}
	}
	e.numSubIs(e.channel(name), 0)
	if owners := e.owners(name); len(owners) != 1 {
		t.Fatalf("lock hash has owner fields %q, want only the holder's", owners)
	}
	// Nor do they keep a place in any waiter queue (sorted sets) in Redis.
	for deadline := time.Now().Add(ftPatience); ; {
		left := e.sortedSetMembers()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancelled waiters still queued in Redis after %v: %q", ftPatience, left)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}

	if err := holder.Mutex(name).Unlock(hold); err != nil {
		t.Fatal(err)
	}
	_ = waiters.Close()
	_ = holder.Close()
	rc1.Close()
	rc2.Close()
	ftWaitGoroutines(t, baseline)
}

// 6. A release is idempotent per request: a retry whose first attempt ran but
// whose reply was lost does not release twice.
func TestFaultIdempotentRelease(t *testing.T) {
	t.Run("replayed request", func(t *testing.T) {
		e := ftNewEnv(t)
		const name = "replay"
		m := e.client().Mutex(name)
		l1, err := m.Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := m.Lock(l1)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := m.HoldCount(l2); err != nil || n != 2 {
			t.Fatalf("HoldCount = %d, %v; want 2", n, err)
		}
		publishes := e.stat("publish")

		for i := range 2 {
			if err := rlock.ReleaseWithRequestID(m, l2, "r1"); err != nil {
				t.Fatalf("release r1 (attempt %d): %v", i+1, err)
			}
		}
		if n, err := m.HoldCount(l2); err != nil || n != 1 {
			t.Fatalf("after request r1 twice: HoldCount = %d, %v; want 1", n, err)
		}
		if l2.Err() != nil {
			t.Fatalf("lock context ended with one level still held: %v", context.Cause(l2))
		}

		if err := rlock.ReleaseWithRequestID(m, l2, "r2"); err != nil {
			t.Fatalf("final release r2: %v", err)
		}
		if e.exists(e.lockKey(name)) {
			t.Fatal("lock key still exists after the final release")
		}
		if !errors.Is(context.Cause(l2), rlock.ErrUnlocked) {
			t.Fatalf("lock context cause %v, want ErrUnlocked", context.Cause(l2))
		}
		// The retry of r2, as Unlock sends it when the first reply was lost:
		// the latched outcome (0: released), not "not held".
		if left, err := rlock.ReleaseScript(e.ctx, m, l2, "r2"); err != nil || left != 0 {
			t.Fatalf("retried final release: %d, %v; want 0 (the first outcome)", left, err)
		}
		// A new request is not confused with it.
		if left, err := rlock.NewReleaseScript(e.ctx, m, l2, "r3"); err != nil || left != -1 {
			t.Fatalf("new release request after the lock was freed: %d, %v; want -1 (not held)", left, err)
		}
		// No one was queued: a Mutex's release announces nothing (only a
		// QuorumMutex's does), the first attempt nor the retry.
		if n := e.stat("publish") - publishes; n != 0 {
			t.Fatalf("%d messages published, want 0", n)
		}
	})

	t.Run("lost reply", func(t *testing.T) {
		// Unlock itself, over a connection that loses the reply of the release
		// script after Redis ran it.
		e := ftNewEnv(t)
		const name = "lostreply"
		flaky := &ftFlakyClient{Client: redistest.Client(t, e.srv)}
		m := e.clientOn(flaky).Mutex(name)
		l1, err := m.Lock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := m.Lock(l1)
		if err != nil {
			t.Fatal(err)
		}
		publishes := e.stat("publish")

		flaky.loseNextReleaseReply()
		if err := m.Unlock(l2); err != nil {
			t.Fatalf("Unlock with a lost reply: %v", err)
		}
		if got := flaky.releases.Swap(0); got != 2 {
			t.Fatalf("release script ran %d times, want 2 (lost reply, then retry)", got)
		}
		if n, err := m.HoldCount(l1); err != nil || n != 1 {
			t.Fatalf("after one Unlock of two holds (retried once): HoldCount = %d, %v; want 1", n, err)
		}
		if l1.Err() != nil {
			t.Fatalf("lock context ended with one level still held: %v", context.Cause(l1))
		}

		flaky.loseNextReleaseReply()
		if err := m.Unlock(l1); err != nil {
			t.Fatalf("final Unlock with a lost reply: %v, want nil (the retry must find the first outcome)", err)
		}
		if got := flaky.releases.Swap(0); got != 2 {
			t.Fatalf("release script ran %d times, want 2 (lost reply, then retry)", got)
		}
		if e.exists(e.lockKey(name)) {
			t.Fatal("lock key still exists after the final Unlock")
		}
		if !errors.Is(context.Cause(l1), rlock.ErrUnlocked) {
			t.Fatalf("lock context cause %v, want ErrUnlocked", context.Cause(l1))
		}
		// No one was queued: a Mutex's release announces nothing (only a
		// QuorumMutex's does), the first attempt nor the retry.
		if n := e.stat("publish") - publishes; n != 0 {
			t.Fatalf("%d messages published, want 0", n)
		}
	})
}

// ftFlakyClient runs every command, but can replace the reply of the next
// release script (recognised by its latch key) with a connection error, as if
// the reply had been lost on the way back.
type ftFlakyClient struct {
	rueidis.Client
	lose     atomic.Bool
	releases atomic.Int32
}

func (f *ftFlakyClient) loseNextReleaseReply() { f.lose.Store(true) }

func (f *ftFlakyClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	// Read the command before Do: rueidis may recycle it afterwards.
	args := cmd.Commands()
	release := len(args) > 4 && redistest.IsScript(args) && strings.Contains(args[4], ":latch:")
	r := f.Client.Do(ctx, cmd)
	if release && r.Error() == nil { // not NOSCRIPT: the script ran
		f.releases.Add(1)
		if f.lose.CompareAndSwap(true, false) {
			return rueidis.NewErrorResult(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
		}
	}
	return r
}

// A Lock whose first attempt took the lock in Redis but lost its reply, and
// which then waited behind a leader of its own Client and gave up, leaves
// nothing behind: the owner id that attempt may have left holding the lock is
// abandoned, and the leader gets the lock at once, not a lease later. (Seen
// in the churn of TestHandoffCancelledWaitersNeverStall on a loaded machine.)
func TestLostFirstAttemptGivenUpBehindLeader(t *testing.T) {
	e := ftNewEnv(t)
	const name = "lostfirst"
	stall := &ftStallClient{Client: redistest.Client(t, e.srv), ran: make(chan struct{}), resume: make(chan struct{})}
	var resumeOnce sync.Once
	resume := func() { resumeOnce.Do(func() { close(stall.resume) }) }
	// A test that fails before the reply is let go must not leave the first
	// Lock stuck in Do (the Client's Close would wait for it).
	t.Cleanup(resume)
	m := e.clientOn(stall).Mutex(name)

	first := make(chan error, 1)
	go func() {
		_, err := m.Lock(e.ctx, rlock.WithWaitTimeout(200*time.Millisecond))
		first <- err
	}()
	select {
	case <-stall.ran: // its acquire.lua took the lock; the reply is held back
	case <-e.ctx.Done():
		t.Fatal("the first attempt never ran")
	}
	if !e.exists(e.lockKey(name)) {
		t.Fatal("the first attempt ran but the lock is free")
	}
	second := make(chan error, 1)
	go func() {
		lc, err := m.Lock(e.ctx, rlock.WithWaitTimeout(10*time.Second))
		if err == nil {
			err = m.Unlock(lc)
		}
		second <- err
	}()
	// The second Lock finds the lock taken and waits in Redis for its Client.
	e.eventually(ftPatience, "the second Lock queued", func() bool { return len(e.sortedSetMembers()) > 0 })
	resume() // the first attempt's reply is lost

	if err := <-first; !errors.Is(err, rlock.ErrLocked) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Lock: %v, want its wait timeout", err)
	}
	start := time.Now()
	if err := <-second; err != nil {
		t.Fatalf("second Lock, behind an owner id the first gave up: %v (after %v; the lease is 30s)", err, time.Since(start))
	}
	e.eventually(ftPatience, "lock key gone", func() bool { return !e.exists(e.lockKey(name)) })
}

// ftStallClient runs every command; the reply of the first acquire.lua that
// runs (recognised by its tombstone key) is held until resume is closed and
// then replaced with a connection error, as if it had been lost on the way
// back. ran is closed once that script has run.
type ftStallClient struct {
	rueidis.Client
	stalled atomic.Bool
	ran     chan struct{}
	resume  chan struct{}
}

func (f *ftStallClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	acquire := len(args) > 5 && redistest.IsScript(args) && strings.Contains(args[5], ":gone:")
	r := f.Client.Do(ctx, cmd)
	if acquire && r.Error() == nil && f.stalled.CompareAndSwap(false, true) {
		close(f.ran)
		<-f.resume
		return rueidis.NewErrorResult(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	}
	return r
}
