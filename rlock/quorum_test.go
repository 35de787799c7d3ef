package rlock_test

// Tests of the quorum lock (Redlock) against independent redis-server
// processes this test owns: masters killed, restarted and paused, mutual
// exclusion between Quorums, releases everywhere, waits without polling.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// qEnv is one quorum test's masters and key prefix.
type qEnv struct {
	t      *testing.T
	ctx    context.Context
	srvs   []*redistest.Server
	raws   []rueidis.Client
	prefix string
}

func qNewEnv(t *testing.T, n int) *qEnv {
	t.Helper()
	srvs := redistest.NewN(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &qEnv{t: t, ctx: ctx, srvs: srvs, prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":")}
	for _, s := range srvs {
		e.raws = append(e.raws, redistest.Client(t, s))
	}
	return e
}

// quorum returns a Quorum over every master, on rueidis clients of its own,
// closed at cleanup.
func (e *qEnv) quorum(opts rlock.QuorumOptions) *rlock.Quorum {
	e.t.Helper()
	clients := make([]rueidis.Client, len(e.srvs))
	for i, s := range e.srvs {
		clients[i] = redistest.Client(e.t, s)
	}
	opts.ClientOptions = append([]rlock.Option{rlock.WithKeyPrefix(e.prefix), rlock.WithWatchdogTimeout(2 * time.Second)}, opts.ClientOptions...)
	q, err := rlock.NewQuorumWith(opts, clients...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = q.Close() })
	return q
}

func (e *qEnv) lockKey(name string) string { return e.prefix + ":{" + name + "}" }

// held reports, per master, whether the lock's key exists there (false for a
// master that does not answer).
func (e *qEnv) held(name string) []bool {
	e.t.Helper()
	out := make([]bool, len(e.raws))
	for i, rc := range e.raws {
		ctx, cancel := context.WithTimeout(e.ctx, time.Second)
		n, err := rc.Do(ctx, rc.B().Exists().Key(e.lockKey(name)).Build()).AsInt64()
		cancel()
		out[i] = err == nil && n == 1
	}
	return out
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// scripts is how many scripts the live masters have run.
func (e *qEnv) scripts(live ...int) int64 {
	e.t.Helper()
	var n int64
	for _, i := range live {
		st, err := e.srvs[i].CommandStats(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		n += redistest.ScriptCalls(st)
	}
	return n
}

// allExpire fails the test if a key under the test's prefix on a live master
// has no expiry: nothing a quorum lock writes may stay forever.
func (e *qEnv) allExpire(live ...int) {
	e.t.Helper()
	for _, i := range live {
		snap, err := e.srvs[i].Snapshot(e.ctx, e.prefix+"*")
		if err != nil {
			e.t.Fatal(err)
		}
		for k, st := range snap {
			if !st.HasExpiry {
				e.t.Errorf("master %d: key %q has no expiry", i, k)
			}
		}
	}
}

func (e *qEnv) eventually(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func (e *qEnv) kill(i ...int) {
	e.t.Helper()
	for _, i := range i {
		if err := e.srvs[i].Kill(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestQuorumTwoOfFiveDownStillAcquires(t *testing.T) {
	e := qNewEnv(t, 5)
	q1, q2 := e.quorum(rlock.QuorumOptions{}), e.quorum(rlock.QuorumOptions{})
	if q1.Majority() != 3 || q1.Masters() != 5 {
		t.Fatalf("majority %d of %d, want 3 of 5", q1.Majority(), q1.Masters())
	}
	e.kill(0, 1)
	m1, m2 := q1.Mutex("job"), q2.Mutex("job")
	lockCtx, err := m1.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock with 3 of 5 masters up: %v", err)
	}
	if v, err := m1.Validity(lockCtx); err != nil || v <= time.Second || v > 2*time.Second {
		t.Fatalf("Validity = %v, %v; want within the 2s lease, above 1s", v, err)
	}
	if got := count(e.held("job")); got != 3 {
		t.Fatalf("key on %d masters, want the 3 live ones", got)
	}
	if _, err := m2.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Fatalf("second Quorum's TryLock = %v, want ErrLocked", err)
	}
	start := time.Now()
	_, err = m2.Lock(e.ctx, rlock.WithWaitTimeout(300*time.Millisecond))
	if !errors.Is(err, rlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Quorum's Lock = %v, want ErrLocked and DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait of 300ms took %v", d)
	}
	if err := m1.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, rlock.ErrUnlocked) {
		t.Fatalf("lock context cause %v, want ErrUnlocked", cause)
	}
	lock2, err := m2.TryLock(e.ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if err := m2.Unlock(lock2); err != nil {
		t.Fatal(err)
	}
}

func TestQuorumThreeOfFiveDownFailsWithNoQuorum(t *testing.T) {
	e := qNewEnv(t, 5)
	q := e.quorum(rlock.QuorumOptions{})
	e.kill(0, 2, 4)
	m := q.Mutex("job")
	_, err := m.TryLock(e.ctx)
	if !errors.Is(err, rlock.ErrNoQuorum) || !errors.Is(err, rlock.ErrUnavailable) {
		t.Fatalf("TryLock with 2 of 5 masters up = %v, want ErrNoQuorum and ErrUnavailable", err)
	}
	start := time.Now()
	_, err = m.Lock(e.ctx, rlock.WithWaitTimeout(500*time.Millisecond))
	// The last error names the connection failure: refused, or, when the
	// last attempt found a connection rueidis had not yet seen closed, EOF.
	connErr := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF)
	if !errors.Is(err, rlock.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) || !connErr {
		t.Fatalf("Lock with 2 of 5 masters up = %v, want ErrNoQuorum, DeadlineExceeded and ECONNREFUSED (or EOF)", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait of 500ms took %v", d)
	}
	t.Log(err)
	// What the rounds took on the live masters was given back.
	e.eventually(5*time.Second, "keys given back on the live masters", func() bool { return count(e.held("job")) == 0 })

	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	if _, err = m.Lock(ctx); !errors.Is(err, rlock.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with ctx deadline = %v, want ErrNoQuorum and DeadlineExceeded", err)
	}
}

// A master that restarts empty mid-hold drops out of it; the hold stays valid
// while a majority remains, and is lost (its context cancelled, the masters
// left released) when no majority does.
func TestQuorumMasterRestartedMidHold(t *testing.T) {
	e := qNewEnv(t, 5)
	const watchdog = 600 * time.Millisecond // renewals every 200ms
	opts := rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithWatchdogTimeout(watchdog)}}
	q1, q2 := e.quorum(opts), e.quorum(opts)
	m1, m2 := q1.Mutex("job"), q2.Mutex("job")
	lockCtx, err := m1.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srvs[0].Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the restarted master dropped from the hold", func() bool {
		return rlock.QuorumLiveMasters(m1, lockCtx) == 4
	})
	// Still held on 4 of 5, and renewed there, for several leases.
	select {
	case <-lockCtx.Done():
		t.Fatalf("hold lost with 4 of 5 masters: %v", context.Cause(lockCtx))
	case <-time.After(3 * watchdog):
	}
	if v, err := m1.Validity(lockCtx); err != nil || v <= 0 {
		t.Fatalf("Validity = %v, %v", v, err)
	}
	if _, err := m2.TryLock(e.ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Fatalf("TryLock of another Quorum = %v, want ErrLocked (it can only take the restarted master)", err)
	}
	if err := m1.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if got := e.held("job"); count(got) != 0 {
		t.Fatalf("keys left after Unlock: %v", got)
	}

	// Three restarts take the majority away: the hold is lost.
	lockCtx, err = m1.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2, 3} {
		if err := e.srvs[i].Restart(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-lockCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold kept with 2 of 5 masters")
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	t.Log(context.Cause(lockCtx))
	// The two masters it still held are released rather than left to expire.
	// (Left alone, their watchdogs would renew them until Unlock.)
	e.eventually(5*time.Second, "the minority left released", func() bool { return count(e.held("job")) == 0 })
	if err := m1.Unlock(lockCtx); !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost hold = %v, want ErrNotHeld and ErrLeaseLost", err)
	}
}

func TestQuorumMutualExclusion(t *testing.T) {
	e := qNewEnv(t, 5)
	const quorums, workers, rounds = 3, 3, 6
	ms := e.mutexes(quorums, "counter", rlock.QuorumOptions{})
	var counter atomic.Int64
	e.contend(e.ctx, ms, workers, rounds, func(int64) {
		v := counter.Load() // a read-modify-write that overlapping holders would break
		runtime.Gosched()
		counter.Store(v + 1)
	}, nil)
	if got, want := counter.Load(), int64(quorums*workers*rounds); got != want {
		t.Fatalf("counter = %d, want %d", got, want)
	}
	if got := e.held("counter"); count(got) != 0 {
		t.Fatalf("keys left: %v", got)
	}
	e.allExpire(0, 1, 2, 3, 4)
}

// Unlock releases the lock on every master, at once, including one whose
// acquisition reply was lost (a paused master: its attempt runs when it
// resumes, and is given back or refused by a tombstone).
func TestQuorumUnlockReleasesEverywhere(t *testing.T) {
	e := qNewEnv(t, 5)
	q := e.quorum(rlock.QuorumOptions{AttemptTimeout: 50 * time.Millisecond,
		ClientOptions: []rlock.Option{rlock.WithWatchdogTimeout(20 * time.Second)}})
	m := q.Mutex("job")
	lockCtx, err := m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(e.held("job")); got != 5 {
		t.Fatalf("held on %d masters, want 5", got)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if got := e.held("job"); count(got) != 0 {
		t.Fatalf("keys left after Unlock: %v", got)
	}

	// One master killed mid-hold: Unlock still returns at once (the other
	// four confirm), well before the unlock timeout (5s).
	lockCtx, err = m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.kill(4)
	start := time.Now()
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Unlock with a master down took %v", d)
	}
	if got := e.held("job"); count(got) != 0 {
		t.Fatalf("keys left after Unlock: %v", got)
	}

	// A paused master: the attempt there times out, the lock is taken on
	// 3 of the 4 others... and its late attempt must not leave a lock there.
	if err := e.srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	lockCtx, err = m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if err := e.srvs[0].Resume(); err != nil {
		t.Fatal(err)
	}
	// Well before the 20s lease would free it.
	e.eventually(5*time.Second, "no key left on the resumed master", func() bool { return count(e.held("job")) == 0 })
	if err := e.srvs[4].Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	lockCtx, err = m.TryLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(e.held("job")); got != 5 {
		t.Fatalf("held on %d masters after the resume and restart, want 5", got)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	e.allExpire(0, 1, 2, 3, 4)
}

// A blocked Lock sleeps (no round while the holder holds) and is woken by the
// release, long before the holder's lease would have let it re-check.
func TestQuorumWaiterWokenByRelease(t *testing.T) {
	e := qNewEnv(t, 5)
	q1, q2 := e.quorum(rlock.QuorumOptions{}), e.quorum(rlock.QuorumOptions{})
	m1, m2 := q1.Mutex("job"), q2.Mutex("job")
	const lease = 4 * time.Second // fixed: no renewals, so the masters run no scripts but the waiter's
	lockCtx, err := m1.Lock(e.ctx, rlock.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var acquired time.Time
	go func() {
		lock2, err := m2.Lock(e.ctx)
		acquired = time.Now()
		if err == nil {
			err = m2.Unlock(lock2)
		}
		got <- err
	}()
	all := []int{0, 1, 2, 3, 4}
	e.eventually(10*time.Second, "the waiter subscribed on every master", func() bool {
		for _, s := range e.srvs {
			if n, err := s.Subscribers(e.ctx, e.lockKey("job")+":unlock"); err != nil || n == 0 {
				return false
			}
		}
		return true
	})
	before := e.scripts(all...)
	time.Sleep(500 * time.Millisecond) // the window in which a spinning waiter would run rounds
	if n := e.scripts(all...) - before; n > int64(len(all)) {
		t.Fatalf("the waiter ran %d scripts in 500ms while the lock was held: it polls", n)
	}
	released := time.Now()
	if err := m1.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	e.await(got, "waiter not woken")
	if d := acquired.Sub(released); d > lease/4 {
		t.Fatalf("waiter took the lock %v after the release (lease %v): not woken by it", d, lease)
	}
}

func TestQuorumLeaseRunsOut(t *testing.T) {
	e := qNewEnv(t, 3)
	q := e.quorum(rlock.QuorumOptions{})
	m := q.Mutex("job")
	const lease = 300 * time.Millisecond
	start := time.Now()
	lockCtx, err := m.Lock(e.ctx, rlock.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := m.Validity(lockCtx); err != nil || v <= 0 || v > lease {
		t.Fatalf("Validity = %v, %v; want within (0, %v]", v, err, lease)
	}
	// Re-entry is counted in the process.
	again, err := m.Lock(lockCtx)
	if err != nil || again != lockCtx {
		t.Fatalf("re-entry: %v", err)
	}
	if _, err := m.Lock(lockCtx, rlock.WithLease(time.Second)); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Fatalf("re-entry with WithLease = %v, want ErrInvalidOption", err)
	}
	if err := m.Unlock(again); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lockCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lock context outlived its lease")
	}
	// It ends slightly before the lease (the drift margin); the bound only
	// allows for a loaded machine noticing late.
	if d := time.Since(start); d < lease/2 || d > lease+time.Second {
		t.Fatalf("lock context ended %v after Lock, lease %v", d, lease)
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	if _, err := m.Validity(lockCtx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Validity of a lost hold = %v, want ErrNotHeld", err)
	}
	if err := m.Unlock(lockCtx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost hold = %v, want ErrNotHeld", err)
	}
}

func TestQuorumBadInput(t *testing.T) {
	srv := redistest.New(t)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	rcs := make([]rueidis.Client, 5)
	for i := range rcs {
		rcs[i] = redistest.Client(t, srv)
	}
	for _, tc := range []struct {
		name    string
		opts    rlock.QuorumOptions
		clients []rueidis.Client
		want    error
	}{
		{"no client", rlock.QuorumOptions{}, nil, rlock.ErrInvalidOption},
		{"nil client", rlock.QuorumOptions{}, []rueidis.Client{nil}, rlock.ErrInvalidOption},
		{"nil among clients", rlock.QuorumOptions{}, []rueidis.Client{rcs[0], nil, rcs[1]}, rlock.ErrInvalidOption},
		{"same client twice", rlock.QuorumOptions{}, []rueidis.Client{rcs[0], rcs[1], rcs[0]}, rlock.ErrInvalidOption},
		{"negative attempt timeout", rlock.QuorumOptions{AttemptTimeout: -time.Millisecond}, rcs[:3], rlock.ErrInvalidLease},
		{"attempt timeout beyond a third of the lease", rlock.QuorumOptions{AttemptTimeout: 11 * time.Second}, rcs[:3], rlock.ErrInvalidLease},
		{"bad key prefix", rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithKeyPrefix("a{b")}}, rcs[:3], rlock.ErrInvalidName},
		{"empty key prefix", rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithKeyPrefix("")}}, rcs[:3], rlock.ErrInvalidName},
		{"glob key prefix", rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithKeyPrefix("tenant*")}}, rcs[:3], rlock.ErrInvalidName},
		{"bad watchdog", rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithWatchdogTimeout(time.Millisecond)}}, rcs[:3], rlock.ErrInvalidLease},
	} {
		q, err := rlock.NewQuorumWith(tc.opts, tc.clients...)
		if !errors.Is(err, tc.want) || q != nil {
			t.Errorf("%s: NewQuorumWith = %v, %v; want %v", tc.name, q, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if _, err := rlock.NewQuorum(); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Errorf("NewQuorum() = %v, want ErrInvalidOption", err)
	}

	// Even numbers are allowed; the majority is N/2+1.
	for n, want := range []int{1, 2, 2, 3, 3} {
		q, err := rlock.NewQuorumWith(rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithKeyPrefix(prefix)}}, rcs[:n+1]...)
		if err != nil {
			t.Fatal(err)
		}
		if q.Majority() != want || q.Masters() != n+1 {
			t.Errorf("%d masters: majority %d, want %d", n+1, q.Majority(), want)
		}
		_ = q.Close()
	}

	q, err := rlock.NewQuorumWith(rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithKeyPrefix(prefix)}}, rcs[:1]...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := q.Mutex("").Lock(ctx); !errors.Is(err, rlock.ErrInvalidName) {
		t.Errorf("Lock of an empty name = %v, want ErrInvalidName", err)
	}
	if err := q.Mutex("a{b}").Unlock(ctx); !errors.Is(err, rlock.ErrInvalidName) {
		t.Errorf("Unlock of a braced name = %v, want ErrInvalidName", err)
	}
	m := q.Mutex("job")
	var nilCtx context.Context
	if _, err := m.Lock(nilCtx); !errors.Is(err, rlock.ErrInvalidOption) {
		t.Errorf("Lock(nil) = %v, want ErrInvalidOption", err)
	}
	if _, err := m.Lock(ctx, rlock.WithLease(0)); !errors.Is(err, rlock.ErrInvalidLease) {
		t.Errorf("Lock with WithLease(0) = %v, want ErrInvalidLease", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock of a context holding nothing = %v, want ErrNotHeld", err)
	}
	if _, err := m.Validity(ctx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Validity of a context holding nothing = %v, want ErrNotHeld", err)
	}
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Mutex("other").Unlock(lockCtx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock of another lock = %v, want ErrNotHeld", err)
	}
	if err := m.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lockCtx); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("second Unlock = %v, want ErrNotHeld", err)
	}
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	if _, err := m.Lock(ctx); !errors.Is(err, rlock.ErrClosed) {
		t.Errorf("Lock after Close = %v, want ErrClosed", err)
	}
	if cause := context.Cause(held); !errors.Is(cause, rlock.ErrLeaseLost) || !errors.Is(cause, rlock.ErrClosed) {
		t.Errorf("hold open at Close ended with %v, want ErrLeaseLost and ErrClosed", cause)
	}
	if s := fmt.Sprint(q, m); !strings.Contains(s, "majority 1") || !strings.Contains(s, `"job"`) {
		t.Errorf("String = %q", s)
	}
}

// A waiter facing a holder of a bare majority takes the free masters in each
// round and gives them back: the give-backs must not wake it (or anyone), or
// it would spin taking and giving back those masters.
func TestQuorumGiveBackWakesNoOne(t *testing.T) {
	e := qNewEnv(t, 5)
	q1 := e.quorum(rlock.QuorumOptions{AttemptTimeout: 50 * time.Millisecond})
	q2 := e.quorum(rlock.QuorumOptions{})
	m1, m2 := q1.Mutex("job"), q2.Mutex("job")
	for _, i := range []int{3, 4} {
		if err := e.srvs[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	const lease = 4 * time.Second
	lockCtx, err := m1.Lock(e.ctx, rlock.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{3, 4} {
		if err := e.srvs[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	e.eventually(5*time.Second, "held on masters 0-2 only", func() bool {
		h := e.held("job")
		return h[0] && h[1] && h[2] && !h[3] && !h[4]
	})
	got := e.lockAndUnlock(m2)
	all := []int{0, 1, 2, 3, 4}
	e.eventually(10*time.Second, "the waiter subscribed on every master", func() bool {
		for _, s := range e.srvs {
			if n, err := s.Subscribers(e.ctx, e.lockKey("job")+":unlock"); err != nil || n == 0 {
				return false
			}
		}
		return true
	})
	before := e.scripts(all...)
	time.Sleep(500 * time.Millisecond) // the window in which a spinning waiter would run rounds
	// A round is 5 acquisitions and 2 give-backs.
	if n := e.scripts(all...) - before; n > 14 {
		t.Fatalf("the waiter ran %d scripts in 500ms while the lock was held: it spins", n)
	}
	if err := m1.Unlock(lockCtx); err != nil {
		t.Fatal(err)
	}
	e.await(got, "waiter not woken")
}
