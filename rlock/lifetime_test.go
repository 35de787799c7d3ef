package rlock_test

// Tests of the lock context's lifetime (issue #11): the caller's ctx bounds
// the wait only; the lock context keeps its values and ends exactly when its
// own hold ends; Unlock with the wrong context says which one to pass; a hold
// whose lock context is dropped is released, with a log line.

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

type ltKey struct{}

// ltCallerCtx is a caller's context with a value, and its cancel (a SIGINT).
func ltCallerCtx(e *ftEnv) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithValue(e.ctx, ltKey{}, "request-7"))
	e.t.Cleanup(cancel)
	return ctx, cancel
}

// ltLive fails unless lockCtx is live and kept the caller's value.
func ltLive(t *testing.T, lockCtx context.Context, what string) {
	t.Helper()
	if err := lockCtx.Err(); err != nil {
		t.Fatalf("%s: lock context ended (%v, cause %v) while the hold lasts", what, err, context.Cause(lockCtx))
	}
	if _, ok := lockCtx.Deadline(); ok {
		t.Fatalf("%s: lock context has a deadline", what)
	}
	if v := lockCtx.Value(ltKey{}); v != "request-7" {
		t.Fatalf("%s: lock context value %v, want the caller's", what, v)
	}
}

func ltCause(t *testing.T, lockCtx context.Context, want error, what string) {
	t.Helper()
	select {
	case <-lockCtx.Done():
	case <-time.After(ftPatience):
		t.Fatalf("%s: lock context still live after %v", what, ftPatience)
	}
	if cause := context.Cause(lockCtx); !errors.Is(cause, want) {
		t.Fatalf("%s: cause %v, want %v", what, cause, want)
	}
}

// Cancelling the caller's ctx (with a deadline too) while holding leaves
// every kind of lock held and its lock context live, with ctx's values; the
// section then unlocks cleanly, and the cause is the Unlock.
func TestLockContextOutlivesCaller(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	ctx, cancel := ltCallerCtx(e)
	ctx, cancelDeadline := context.WithTimeout(ctx, time.Hour)
	defer cancelDeadline()

	m := c.Mutex("outlive")
	lm := ftLock(t, ctx, m)
	fair := c.FairMutex("outlive-fair")
	lf := ftLock(t, ctx, fair)
	rw := c.RWMutex("outlive-rw")
	lw := rwLock(t, ctx, rw, true)
	lr := rwLock(t, lw, rw, false) // a read lock under the write lock
	ml := c.MultiLock("outlive-a", "outlive-b")
	lml, err := ml.Lock(ctx)
	if err != nil {
		t.Fatalf("MultiLock: %v", err)
	}
	cancel()

	for what, l := range map[string]context.Context{"mutex": lm, "fair": lf, "write": lw, "read": lr, "multi": lml} {
		ltLive(t, l, what)
	}
	for _, name := range []string{"outlive", "outlive-fair", "outlive-a", "outlive-b"} {
		if locked, err := c.Mutex(name).IsLocked(e.ctx); err != nil || !locked {
			t.Fatalf("%s after the caller's cancel: locked %v, %v; want held", name, locked, err)
		}
	}
	if n, err := m.HoldCount(lm); err != nil || n != 1 {
		t.Fatalf("HoldCount after the caller's cancel: %d, %v", n, err)
	}
	// A re-entry with the lock context works after the caller's cancel.
	inner := ftLock(t, lm, m)
	mustUnlockFT(t, m, inner)
	ltLive(t, lm, "mutex after the inner Unlock")

	mustUnlockFT(t, m, lm)
	ltCause(t, lm, rlock.ErrUnlocked, "mutex")
	mustUnlockFT(t, fair, lf)
	ltCause(t, lf, rlock.ErrUnlocked, "fair mutex")
	rwUnlock(t, rw, lr, true) // the write lock, through the read lock's context
	ltCause(t, lw, rlock.ErrUnlocked, "write lock")
	ltLive(t, lr, "read lock after the write Unlock")
	rwUnlock(t, rw, lr, false)
	ltCause(t, lr, rlock.ErrUnlocked, "read lock")
	if err := ml.Unlock(lml); err != nil {
		t.Fatalf("MultiLock Unlock: %v", err)
	}
	ltCause(t, lml, rlock.ErrUnlocked, "multilock")
}

// A lock passed within the Client's cohort (not taken from Redis) has the
// same lifetime: the waiter's ctx, cancelled after it got the lock, does not
// end it.
func TestLockContextOutlivesCallerCohortPass(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	m := c.Mutex("outlive-pass")
	first := ftLock(t, e.ctx, m)
	ctx, cancel := ltCallerCtx(e)
	ch := lockAsync(ctx, m)
	e.eventually(ftPatience, "the second goroutine waits in the Client", func() bool { return rlock.WaitingInClient(c, "outlive-pass") == 1 })
	mustUnlockFT(t, m, first)
	r := receiveLock(t, ch, ftPatience, "the cohort waiter")
	if r.err != nil {
		t.Fatalf("cohort waiter: %v", r.err)
	}
	cancel()
	ltLive(t, r.lc, "passed hold")
	mustUnlockFT(t, m, r.lc)
	ltCause(t, r.lc, rlock.ErrUnlocked, "passed hold")
}

// A holder whose own ctx was cancelled still learns of a loss: after
// ForceUnlock by another Client, the cause is ErrLeaseLost, not the
// caller's context.Canceled.
func TestLockContextLossAfterCallerCancel(t *testing.T) {
	e := ftNewEnv(t)
	a := e.client(rlock.WithWatchdogTimeout(600 * time.Millisecond))
	b := e.client()
	ctx, cancel := ltCallerCtx(e)
	lm := ftLock(t, ctx, a.Mutex("lost"))
	rw := a.RWMutex("lost-rw")
	lw := rwLock(t, ctx, rw, true)
	cancel()
	ltLive(t, lm, "before ForceUnlock")
	if ok, err := b.Mutex("lost").ForceUnlock(e.ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock: %v, %v", ok, err)
	}
	ltCause(t, lm, rlock.ErrLeaseLost, "after ForceUnlock")
	if context.Cause(lm) == context.Canceled {
		t.Fatal("the caller's cancellation shows as the cause")
	}
	if err := a.Mutex("lost").Unlock(lm); !errors.Is(err, rlock.ErrNotHeld) || !errors.Is(err, rlock.ErrLeaseLost) {
		t.Fatalf("Unlock after the loss: %v, want ErrNotHeld and ErrLeaseLost", err)
	}
	// The write lock lost its key too (deleted by hand): same story.
	if err := e.raw.Do(e.ctx, e.raw.B().Del().Key(e.lockKey("lost-rw")+":rw").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ltCause(t, lw, rlock.ErrLeaseLost, "write lock after its key was deleted")
}

// Nested locks: B taken with A's lock context. Unlocking A ends A's context
// only; B stays held and live until its own Unlock, whose cause names it.
func TestLockContextNested(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client()
	a, b := c.Mutex("nest-a"), c.Mutex("nest-b")
	lockA := ftLock(t, e.ctx, a)
	lockB := ftLock(t, lockA, b)
	mustUnlockFT(t, a, lockA)
	ltCause(t, lockA, rlock.ErrUnlocked, "A")
	if err := lockB.Err(); err != nil {
		t.Fatalf("B's lock context ended with A's Unlock: %v", context.Cause(lockB))
	}
	if locked, err := b.IsLocked(e.ctx); err != nil || !locked {
		t.Fatalf("B after A's Unlock: locked %v, %v", locked, err)
	}
	if locked, err := a.IsLocked(e.ctx); err != nil || locked {
		t.Fatalf("A after its Unlock: locked %v, %v", locked, err)
	}
	// lockB still carries A's ended hold: it reports A as unlocked.
	if err := a.Unlock(lockB); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "already unlocked") {
		t.Fatalf("A's Unlock through lockB: %v, want ErrNotHeld (already unlocked)", err)
	}
	mustUnlockFT(t, b, lockB)
	ltCause(t, lockB, rlock.ErrUnlocked, "B")

	// The other way round: B's loss does not end A.
	lockA = ftLock(t, e.ctx, a)
	lockB = ftLock(t, lockA, b, rlock.WithLease(200*time.Millisecond))
	ltCause(t, lockB, rlock.ErrLeaseLost, "B with a short lease")
	if lockA.Err() != nil {
		t.Fatalf("A ended with B's loss: %v", context.Cause(lockA))
	}
	mustUnlockFT(t, a, lockA)
}

// Unlock with the context given to Lock (the etcd habit) fails with an
// ErrNotHeld that says which context to pass, and leaves the lock held; with
// another Client's Mutex it says the context holds the lock through that
// Client.
func TestUnlockWrongContext(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(), e.client()
	ctx := e.ctx
	m := a.Mutex("wrong")
	lockCtx := ftLock(t, ctx, m)
	err := m.Unlock(ctx)
	if !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "pass the lock context that Lock returned") {
		t.Fatalf("Unlock(ctx): %v, want ErrNotHeld saying to pass the lock context", err)
	}
	if _, err := m.Token(ctx); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "pass the lock context") {
		t.Fatalf("Token(ctx): %v", err)
	}
	err = b.Mutex("wrong").Unlock(lockCtx)
	if !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "through another Client ("+a.ID()+")") {
		t.Fatalf("Unlock through another Client's Mutex: %v, want ErrNotHeld naming Client %s", err, a.ID())
	}
	if strings.Contains(err.Error(), "holds no lock") {
		t.Fatalf("Unlock through another Client's Mutex says the context holds no lock: %v", err)
	}
	if locked, err := m.IsLocked(ctx); err != nil || !locked {
		t.Fatalf("after the wrong Unlocks: locked %v, %v; want held", locked, err)
	}
	mustUnlockFT(t, m, lockCtx)

	rw := a.RWMutex("wrong-rw")
	w := rwLock(t, ctx, rw, true)
	for _, tc := range []struct {
		what   string
		unlock func(context.Context) error
		ctx    context.Context
		want   string
	}{
		{"Unlock(ctx)", rw.Unlock, ctx, "pass the lock context that Lock returned"},
		{"RUnlock(ctx)", rw.RUnlock, ctx, "pass the lock context that RLock returned"},
		{"RUnlock of a write hold", rw.RUnlock, w, "holds the write lock"},
		{"another Client's RWMutex", b.RWMutex("wrong-rw").Unlock, w, "through another Client (" + a.ID() + ")"},
	} {
		if err := tc.unlock(tc.ctx); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want ErrNotHeld saying %q", tc.what, err, tc.want)
		}
	}
	rwUnlock(t, rw, w, true)

	ml := a.MultiLock("wrong-x", "wrong-y")
	lml, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(ctx); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "pass the lock context") {
		t.Fatalf("MultiLock Unlock(ctx): %v", err)
	}
	if err := ml.Unlock(lml); err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(lml); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "already unlocked") {
		t.Fatalf("second MultiLock Unlock: %v, want ErrNotHeld (already unlocked)", err)
	}
}

func ltLogged() (*redistest.LogBuffer, rlock.Option) {
	l := &redistest.LogBuffer{}
	return l, rlock.WithLogger(slog.New(slog.NewTextHandler(l, nil)))
}

// ltCollected runs garbage collections until cond holds (a dropped lock
// context's cleanup ran and released the hold), within generous bounds.
func ltCollected(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		runtime.GC()
		return cond()
	}, 30*time.Second, 20*time.Millisecond, what)
}

// ltDrop takes a lock and drops its lock context without Unlock.
//
//go:noinline
func ltDrop(t *testing.T, lock func(context.Context, ...rlock.LockOption) (context.Context, error), ctx context.Context) {
	t.Helper()
	if _, err := lock(ctx); err != nil {
		t.Fatalf("lock: %v", err)
	}
}

// A hold whose lock context the program dropped without Unlock is released
// once the context is garbage, with a log line; a dropped context whose hold
// was unlocked logs nothing.
func TestDroppedLockContextReleased(t *testing.T) {
	e := ftNewEnv(t)
	logs, withLog := ltLogged()
	c := e.client(withLog)
	other := e.client()

	unlocked := ftLock(t, e.ctx, c.Mutex("drop-unlocked"))
	mustUnlockFT(t, c.Mutex("drop-unlocked"), unlocked)

	ltDrop(t, c.Mutex("drop-mutex").Lock, e.ctx)
	ltDrop(t, c.RWMutex("drop-rw").RLock, e.ctx)
	ltDrop(t, c.MultiLock("drop-x", "drop-y").Lock, e.ctx)
	// (Whether they are still held now depends on when the collector ran:
	// the log lines below tell that the cleanups found them held.)

	free := func(name string) func() bool {
		return func() bool {
			locked, err := other.Mutex(name).IsLocked(e.ctx)
			return err == nil && !locked
		}
	}
	ltCollected(t, "the dropped Mutex hold released", free("drop-mutex"))
	ltCollected(t, "the dropped MultiLock's members released", func() bool { return free("drop-x")() && free("drop-y")() })
	ltCollected(t, "the dropped read hold released", func() bool {
		l, err := other.RWMutex("drop-rw").TryLock(e.ctx)
		if err == nil {
			_ = other.RWMutex("drop-rw").Unlock(l)
		}
		return err == nil
	})
	ltCollected(t, "three log lines", func() bool { return strings.Count(logs.String(), "its hold was released") == 3 })
	out := logs.String()
	for _, want := range []string{"lock=drop-mutex", "kind=mutex", "lock=drop-rw", `kind="rwmutex read lock"`, "lock=drop-x,drop-y", "kind=multilock", "level=WARN"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "drop-unlocked") {
		t.Errorf("a dropped context whose hold was unlocked was logged:\n%s", out)
	}
	// The Client's next Lock of a released name works as usual.
	l := ftLock(t, e.ctx, c.Mutex("drop-mutex"))
	mustUnlockFT(t, c.Mutex("drop-mutex"), l)
}

// A MultiLock's members are watched through the MultiLock's context, not
// their own: while that context is reachable, garbage collection releases
// nothing, even though the members' own lock contexts were dropped inside
// Lock.
func TestDroppedLockContextMultiLockMembersKept(t *testing.T) {
	e := ftNewEnv(t)
	logs, withLog := ltLogged()
	c := e.client(withLog)
	ml := c.MultiLock("kept-x", "kept-y")
	lml, err := ml.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A probe dropped after the MultiLock: once the collector has released
	// it, it has had its chance at the members' contexts too.
	ltDrop(t, c.Mutex("kept-probe").Lock, e.ctx)
	ltCollected(t, "the probe released", func() bool { return strings.Contains(logs.String(), "lock=kept-probe") })
	if strings.Contains(logs.String(), "kept-x") || strings.Contains(logs.String(), "kept-y") {
		t.Fatalf("a member of a live MultiLock was released:\n%s", logs.String())
	}
	if lml.Err() != nil {
		t.Fatalf("MultiLock context ended: %v", context.Cause(lml))
	}
	if err := ml.Unlock(lml); err != nil {
		t.Fatalf("Unlock of the kept MultiLock: %v", err)
	}
}

// A quorum lock has the same lifetime: the caller's cancel leaves it held on
// the masters and its context live; a dropped one is released on every
// master, with a log line.
func TestLockContextQuorum(t *testing.T) {
	e := qNewEnv(t, 3)
	logs, withLog := ltLogged()
	q := e.quorum(rlock.QuorumOptions{ClientOptions: []rlock.Option{withLog}})
	qm := q.Mutex("q-outlive")
	ctx, cancel := context.WithCancel(context.WithValue(e.ctx, ltKey{}, "request-7"))
	defer cancel()
	lockCtx, err := qm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	ltLive(t, lockCtx, "quorum lock")
	if got := count(e.held("q-outlive")); got != 3 {
		t.Fatalf("after the caller's cancel: held on %d masters, want 3", got)
	}
	if err := qm.Unlock(ctx); !errors.Is(err, rlock.ErrNotHeld) || !strings.Contains(err.Error(), "pass the lock context that Lock returned") {
		t.Fatalf("Unlock(ctx): %v, want ErrNotHeld saying to pass the lock context", err)
	}
	if err := qm.Unlock(lockCtx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	ltCause(t, lockCtx, rlock.ErrUnlocked, "quorum lock")

	ltDrop(t, q.Mutex("q-drop").Lock, e.ctx)
	ltCollected(t, "the dropped quorum hold released on every master", func() bool {
		return count(e.held("q-drop")) == 0 && strings.Contains(logs.String(), "lock=q-drop")
	})
	if !strings.Contains(logs.String(), `kind="quorum lock"`) {
		t.Fatalf("log: %s", logs.String())
	}
}
