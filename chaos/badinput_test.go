package chaos_test

// Bad input: every public function of rlock and semaphore with every invalid
// argument must return a clear error (matching the package's sentinel), not
// panic, and leave Redis unchanged.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// badNames are lock and semaphore names that must be refused.
var badNames = map[string]string{
	"empty":         "",
	"huge":          strings.Repeat("n", rlock.MaxNameLength+1),
	"open brace":    "a{b",
	"close brace":   "a}b",
	"hash tag":      "{x}",
	"invalid utf-8": "a\xff\xfeb",
	"NUL":           "a\x00b",
	"newline":       "a\nb",
	"escape":        "\x1b[31m",
}

// badCase is one call that must fail with an error matching want.
type badCase struct {
	name string
	want error
	call func() error
	// mayChange marks a valid call that fails by design (a wait that timed
	// out) and may leave traces in Redis: the arrival counter, a short-lived
	// tombstone.
	mayChange bool
}

// callSafely runs f and turns a panic into a value.
func callSafely(f func() error) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return f(), nil
}

func e2[T any](_ T, err error) error { return err }

func e3[T, U any](_ T, _ U, err error) error { return err }

func TestBadInput(t *testing.T) {
	srv := redistest.New(t)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newRC := func() rueidis.Client { return redistest.Client(t, srv) }
	newClient := func() *rlock.Client {
		// A watchdog renewal rewrites the held semaphores' keys (their
		// expiries): with the default 30s lease one falls within the test
		// on a loaded machine and would read as a change a bad call made.
		c, err := rlock.New(newRC(), rlock.WithKeyPrefix(prefix), rlock.WithWatchdogTimeout(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// State the bad calls must not disturb: a lock held by another client,
	// a semaphore with limit 2 and one permit held, and the same for a
	// non-reentrant Lock.
	other := newClient()
	heldMutex := other.Mutex("held")
	heldCtx, err := heldMutex.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	heldSem := semaphore.New(other, "sem")
	if _, err := heldSem.TrySetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	permitCtx, err := heldSem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	heldLock := semaphore.NewLock(other, "lock")
	lockedCtx, err := heldLock.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := semaphore.New(other, "three").TrySetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}

	c := newClient()
	m := c.Mutex("held") // the same lock, another owner
	free := c.Mutex("free")
	sem := semaphore.New(c, "sem")
	noLimit := semaphore.New(c, "nolimit")
	lock := semaphore.NewLock(c, "lock")
	// A client of another prefix: its lock contexts are foreign to c.
	otherPrefix, err := rlock.New(newRC(), rlock.WithKeyPrefix(prefix+"-other"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = otherPrefix.Close() })
	closed := newClient()
	closedMutex := closed.Mutex("held")
	closedSem := semaphore.New(closed, "sem")
	closedLock := semaphore.NewLock(closed, "lock")
	// Holds still open when their client closes.
	orphan := closed.Mutex("orphan")
	orphanCtx, err := orphan.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orphanSem := semaphore.New(closed, "orphan-sem")
	if _, err := orphanSem.TrySetLimit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	orphanPermit, err := orphanSem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()

	var nilCtx context.Context // deliberately nil
	bg := context.Background()
	var cases []badCase
	add := func(name string, want error, call func() error) {
		cases = append(cases, badCase{name: name, want: want, call: call})
	}

	// rlock.New and its options.
	add("rlock.New nil client", rlock.ErrInvalidOption, func() error { return e2(rlock.New(nil)) })
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond} {
		add(fmt.Sprintf("rlock.WithWatchdogTimeout(%v)", d), rlock.ErrInvalidLease, func() error {
			return newAndClose(newRC(), rlock.WithWatchdogTimeout(d))
		})
	}
	for _, d := range []time.Duration{0, -time.Second} {
		add(fmt.Sprintf("rlock.WithUnlockTimeout(%v)", d), rlock.ErrInvalidLease, func() error {
			return newAndClose(newRC(), rlock.WithUnlockTimeout(d))
		})
		add(fmt.Sprintf("rlock.WithNoExpiryPoll(%v)", d), rlock.ErrInvalidLease, func() error {
			return newAndClose(newRC(), rlock.WithNoExpiryPoll(d))
		})
	}
	for what, name := range badNames {
		add("rlock.WithKeyPrefix "+what, rlock.ErrInvalidName, func() error {
			return newAndClose(newRC(), rlock.WithKeyPrefix(name))
		})
	}
	// Valid as lock names, not as prefixes: ACL patterns could not confine a
	// user to them.
	for what, prefix := range map[string]string{"star": "a*", "question mark": "a?", "bracket": "a[b]", "backslash": `a\b`} {
		add("rlock.WithKeyPrefix "+what, rlock.ErrInvalidName, func() error {
			return newAndClose(newRC(), rlock.WithKeyPrefix(prefix))
		})
	}
	for what, opt := range map[string]pubsub.Option{
		"WithConnections(0)": pubsub.WithConnections(0), "WithConnections(65)": pubsub.WithConnections(65),
		"WithLinger(-1s)": pubsub.WithLinger(-time.Second), "WithMaxReconnectBackoff(0)": pubsub.WithMaxReconnectBackoff(0),
	} {
		add("rlock.WithPubSub "+what, rlock.ErrInvalidOption, func() error {
			return newAndClose(newRC(), rlock.WithPubSub(opt))
		})
	}

	// Every Mutex method with an invalid name.
	for what, name := range badNames {
		bad := c.Mutex(name)
		for method, call := range mutexMethods(bad, bg, heldCtx) {
			add(fmt.Sprintf("Mutex(%s).%s", what, method), rlock.ErrInvalidName, call)
		}
	}
	// Invalid options and contexts for a valid Mutex.
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Microsecond} {
		add(fmt.Sprintf("Lock WithLease(%v)", d), rlock.ErrInvalidLease, func() error { return e2(free.Lock(bg, rlock.WithLease(d))) })
		add(fmt.Sprintf("TryLock WithLease(%v)", d), rlock.ErrInvalidLease, func() error { return e2(free.TryLock(bg, rlock.WithLease(d))) })
	}
	for _, d := range []time.Duration{-time.Second} { // 0 is one attempt
		add(fmt.Sprintf("Lock WithWaitTimeout(%v)", d), rlock.ErrInvalidLease, func() error { return e2(free.Lock(bg, rlock.WithWaitTimeout(d))) })
	}
	add("Lock nil ctx", rlock.ErrInvalidOption, func() error { return e2(free.Lock(nilCtx)) })
	add("TryLock nil ctx", rlock.ErrInvalidOption, func() error { return e2(free.TryLock(nilCtx)) })
	add("TryLock held by another owner", rlock.ErrLocked, func() error { return e2(m.TryLock(bg)) })
	add("Lock held, wait timeout", rlock.ErrLocked, func() error { return e2(m.Lock(bg, rlock.WithWaitTimeout(50*time.Millisecond))) })
	cases[len(cases)-1].mayChange = true
	add("Unlock nil ctx", rlock.ErrNotHeld, func() error { return m.Unlock(nilCtx) })
	add("Unlock background ctx", rlock.ErrNotHeld, func() error { return m.Unlock(bg) })
	add("Unlock another client's lock ctx", rlock.ErrNotHeld, func() error { return m.Unlock(heldCtx) })
	add("Unlock another lock's ctx", rlock.ErrNotHeld, func() error { return free.Unlock(heldCtx) })
	add("Unlock a semaphore permit ctx", rlock.ErrNotHeld, func() error { return m.Unlock(permitCtx) })
	add("Unlock another prefix's lock ctx", rlock.ErrNotHeld, func() error {
		return otherPrefix.Mutex("held").Unlock(heldCtx)
	})
	add("Token background ctx", rlock.ErrNotHeld, func() error { return e2(m.Token(bg)) })
	add("Token nil ctx", rlock.ErrNotHeld, func() error { return e2(m.Token(nilCtx)) })
	add("Token another client's lock ctx", rlock.ErrNotHeld, func() error { return e2(m.Token(heldCtx)) })
	add("HoldCount nil ctx", nil, func() error { return e2(m.HoldCount(nilCtx)) })
	add("IsLocked nil ctx", rlock.ErrInvalidOption, func() error { return e2(m.IsLocked(nilCtx)) })
	add("TTL nil ctx", rlock.ErrInvalidOption, func() error { return e2(m.TTL(nilCtx)) })
	add("ForceUnlock nil ctx", rlock.ErrInvalidOption, func() error { return e2(m.ForceUnlock(nilCtx)) })
	// Use after Close.
	add("closed client Unlock of its own hold", rlock.ErrNotHeld, func() error { return orphan.Unlock(orphanCtx) })
	add("closed client Unlock of its own hold is ErrClosed", rlock.ErrClosed, func() error { return orphan.Unlock(orphanCtx) })
	add("closed client Token of its own hold", nil, func() error { return e2(orphan.Token(orphanCtx)) })
	add("closed client Release of its own permit", semaphore.ErrNotHeld, func() error { return orphanSem.Release(orphanPermit) })
	add("closed client Release of its own permit is ErrClosed", semaphore.ErrClosed, func() error { return orphanSem.Release(orphanPermit) })
	for method, call := range mutexMethods(closedMutex, bg, heldCtx) {
		want := rlock.ErrClosed
		if method == "Unlock" || method == "Token" {
			want = rlock.ErrNotHeld // the context is not the closed client's
		}
		add("closed client Mutex."+method, want, call)
	}

	// Every Semaphore and Lock method with an invalid name or a nil client.
	for what, name := range badNames {
		for method, call := range semaphoreMethods(semaphore.New(c, name), bg, permitCtx) {
			add(fmt.Sprintf("semaphore.New(%s).%s", what, method), semaphore.ErrInvalidName, call)
		}
		for method, call := range lockMethods(semaphore.NewLock(c, name), bg, lockedCtx) {
			add(fmt.Sprintf("semaphore.NewLock(%s).%s", what, method), semaphore.ErrInvalidName, call)
		}
	}
	for method, call := range semaphoreMethods(semaphore.New(nil, "x"), bg, permitCtx) {
		add("semaphore.New(nil client)."+method, semaphore.ErrInvalidClient, call)
	}
	for method, call := range lockMethods(semaphore.NewLock(nil, "x"), bg, lockedCtx) {
		add("semaphore.NewLock(nil client)."+method, semaphore.ErrInvalidClient, call)
	}
	// Invalid counts, leases and contexts for a valid Semaphore.
	for _, n := range []int64{-1, semaphore.MaxPermits + 1} {
		add(fmt.Sprintf("TrySetLimit(%d)", n), semaphore.ErrInvalidCount, func() error { return e2(sem.TrySetLimit(bg, n)) })
		add(fmt.Sprintf("SetLimit(%d)", n), semaphore.ErrInvalidCount, func() error { return sem.SetLimit(bg, n) })
	}
	for _, n := range []int64{0, -1, semaphore.MaxPermits + 1} {
		add(fmt.Sprintf("Acquire(%d)", n), semaphore.ErrInvalidCount, func() error { return e2(sem.Acquire(bg, n)) })
		add(fmt.Sprintf("TryAcquire(%d)", n), semaphore.ErrInvalidCount, func() error { return e2(sem.TryAcquire(bg, n)) })
	}
	add("Acquire above the limit", semaphore.ErrExceedsLimit, func() error { return e2(sem.Acquire(bg, 3)) })
	add("TryAcquire above the limit", semaphore.ErrExceedsLimit, func() error { return e2(sem.TryAcquire(bg, 3)) })
	add("Acquire without a limit", semaphore.ErrNoLimit, func() error { return e2(noLimit.Acquire(bg, 1)) })
	add("TryAcquire without a limit", semaphore.ErrNoLimit, func() error { return e2(noLimit.TryAcquire(bg, 1)) })
	add("Drain without a limit", semaphore.ErrNoLimit, func() error { return e3(noLimit.Drain(bg)) })
	add("Limit without a limit", semaphore.ErrNoLimit, func() error { return e2(noLimit.Limit(bg)) })
	add("Available without a limit", semaphore.ErrNoLimit, func() error { return e2(noLimit.Available(bg)) })
	add("State without a limit", semaphore.ErrNoLimit, func() error { return e2(noLimit.State(bg)) })
	add("Lock on a semaphore with limit 3", semaphore.ErrExceedsLimit, func() error {
		return e2(semaphore.NewLock(c, "three").TryLock(bg))
	})
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Microsecond} {
		add(fmt.Sprintf("Acquire WithLease(%v)", d), semaphore.ErrInvalidLease, func() error { return e2(sem.Acquire(bg, 1, semaphore.WithLease(d))) })
		add(fmt.Sprintf("Drain WithLease(%v)", d), semaphore.ErrInvalidLease, func() error { return e3(sem.Drain(bg, semaphore.WithLease(d))) })
		add(fmt.Sprintf("Lock.Lock WithLease(%v)", d), semaphore.ErrInvalidLease, func() error { return e2(lock.Lock(bg, semaphore.WithLease(d))) })
	}
	for _, d := range []time.Duration{-time.Second} { // 0 is one attempt
		add(fmt.Sprintf("Acquire WithWaitTimeout(%v)", d), semaphore.ErrInvalidLease, func() error {
			return e2(sem.Acquire(bg, 1, semaphore.WithWaitTimeout(d)))
		})
	}
	add("Acquire nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.Acquire(nilCtx, 1)) })
	add("TryAcquire nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.TryAcquire(nilCtx, 1)) })
	add("Drain nil ctx", semaphore.ErrInvalidOption, func() error { return e3(sem.Drain(nilCtx)) })
	add("TrySetLimit nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.TrySetLimit(nilCtx, 2)) })
	add("SetLimit nil ctx", semaphore.ErrInvalidOption, func() error { return sem.SetLimit(nilCtx, 2) })
	add("State nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.State(nilCtx)) })
	add("Limit nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.Limit(nilCtx)) })
	add("Available nil ctx", semaphore.ErrInvalidOption, func() error { return e2(sem.Available(nilCtx)) })
	add("Lock.Lock nil ctx", semaphore.ErrInvalidOption, func() error { return e2(lock.Lock(nilCtx)) })
	add("Lock.TryLock nil ctx", semaphore.ErrInvalidOption, func() error { return e2(lock.TryLock(nilCtx)) })
	add("TryAcquire with permits taken", semaphore.ErrNoPermits, func() error { return e2(sem.TryAcquire(bg, 2)) })
	add("Lock.TryLock held", semaphore.ErrNoPermits, func() error { return e2(lock.TryLock(bg)) })
	add("Release nil ctx", semaphore.ErrNotHeld, func() error { return sem.Release(nilCtx) })
	add("Release background ctx", semaphore.ErrNotHeld, func() error { return sem.Release(bg) })
	add("Release another client's permit ctx", semaphore.ErrNotHeld, func() error { return sem.Release(permitCtx) })
	add("Release a Mutex lock ctx", semaphore.ErrNotHeld, func() error { return sem.Release(heldCtx) })
	add("Release another semaphore's permit ctx", semaphore.ErrNotHeld, func() error { return noLimit.Release(permitCtx) })
	add("Lock.Unlock another client's ctx", semaphore.ErrNotHeld, func() error { return lock.Unlock(lockedCtx) })
	add("Lock.Unlock nil ctx", semaphore.ErrNotHeld, func() error { return lock.Unlock(nilCtx) })
	for method, call := range semaphoreMethods(closedSem, bg, permitCtx) {
		want := semaphore.ErrClosed
		if method == "Release" {
			want = semaphore.ErrNotHeld // the context is not the closed client's
		}
		add("closed client Semaphore."+method, want, call)
	}
	for method, call := range lockMethods(closedLock, bg, lockedCtx) {
		want := semaphore.ErrClosed
		if method == "Unlock" {
			want = semaphore.ErrNotHeld
		}
		add("closed client Lock."+method, want, call)
	}

	slices.SortFunc(cases, func(a, b badCase) int { return strings.Compare(a.name, b.name) })
	before := snapshot(t, ctx, srv, prefix)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err, panicked := callSafely(tc.call)
			switch {
			case panicked != nil:
				t.Fatalf("panic: %v", panicked)
			case tc.want == nil && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("want an error matching %q, got %v", tc.want, err)
			}
			if err != nil && err.Error() == "" {
				t.Fatal("empty error message")
			}
		})
		after := snapshot(t, ctx, srv, prefix)
		if tc.mayChange {
			// Giving up a place in the queue happens in the background:
			// wait for Redis to settle.
			deadline := time.Now().Add(10 * time.Second)
			for {
				time.Sleep(200 * time.Millisecond) // polling with a deadline
				next := snapshot(t, ctx, srv, prefix)
				if snapshotDiff(after, next) == "" || time.Now().After(deadline) {
					after = next
					break
				}
				after = next
			}
		}
		if diff := snapshotDiff(before, after); diff != "" && !tc.mayChange {
			t.Errorf("%s changed Redis: %s", tc.name, diff)
		}
		before = after
	}

	// The state set up is intact: the holds are still held.
	for _, check := range []struct {
		name string
		live context.Context
	}{{"mutex", heldCtx}, {"permit", permitCtx}, {"lock", lockedCtx}} {
		if check.live.Err() != nil {
			t.Errorf("%s hold ended: %v", check.name, context.Cause(check.live))
		}
	}
	if err := heldMutex.Unlock(heldCtx); err != nil {
		t.Error(err)
	}
	if err := heldSem.Release(permitCtx); err != nil {
		t.Error(err)
	}
	if err := heldLock.Unlock(lockedCtx); err != nil {
		t.Error(err)
	}
}

// snapshot returns the keys under prefix, ignoring short-lived release
// latches, which only valid releases leave.
func snapshot(t *testing.T, ctx context.Context, srv *redistest.Server, prefix string) map[string]redistest.KeyState {
	t.Helper()
	snap, err := srv.Snapshot(ctx, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// snapshotDiff describes how after differs from before; a key with an
// expiry that disappeared has expired, which is no change.
func snapshotDiff(before, after map[string]redistest.KeyState) string {
	var out []string
	for k, b := range before {
		a, ok := after[k]
		switch {
		case !ok && !b.HasExpiry:
			out = append(out, "deleted "+k)
		case ok && a != b:
			out = append(out, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, "created "+k)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func newAndClose(rc rueidis.Client, opts ...rlock.Option) error {
	c, err := rlock.New(rc, opts...)
	if err == nil {
		_ = c.Close()
	}
	return err
}

func mutexMethods(m *rlock.Mutex, ctx, lockCtx context.Context) map[string]func() error {
	return map[string]func() error{
		"Lock":        func() error { return e2(m.Lock(ctx)) },
		"TryLock":     func() error { return e2(m.TryLock(ctx)) },
		"Unlock":      func() error { return m.Unlock(lockCtx) },
		"Token":       func() error { return e2(m.Token(lockCtx)) },
		"HoldCount":   func() error { return e2(m.HoldCount(lockCtx)) },
		"IsLocked":    func() error { return e2(m.IsLocked(ctx)) },
		"TTL":         func() error { return e2(m.TTL(ctx)) },
		"ForceUnlock": func() error { return e2(m.ForceUnlock(ctx)) },
	}
}

func semaphoreMethods(s *semaphore.Semaphore, ctx, permitCtx context.Context) map[string]func() error {
	return map[string]func() error{
		"TrySetLimit": func() error { return e2(s.TrySetLimit(ctx, 2)) },
		"SetLimit":    func() error { return s.SetLimit(ctx, 2) },
		"Limit":       func() error { return e2(s.Limit(ctx)) },
		"Available":   func() error { return e2(s.Available(ctx)) },
		"State":       func() error { return e2(s.State(ctx)) },
		"Acquire":     func() error { return e2(s.Acquire(ctx, 1)) },
		"TryAcquire":  func() error { return e2(s.TryAcquire(ctx, 1)) },
		"Drain":       func() error { return e3(s.Drain(ctx)) },
		"Release":     func() error { return s.Release(permitCtx) },
	}
}

func lockMethods(l *semaphore.Lock, ctx, lockCtx context.Context) map[string]func() error {
	return map[string]func() error{
		"Lock":    func() error { return e2(l.Lock(ctx)) },
		"TryLock": func() error { return e2(l.TryLock(ctx)) },
		"Unlock":  func() error { return l.Unlock(lockCtx) },
	}
}
