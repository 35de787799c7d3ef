package semaphore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Tests of rlock.WithReplicaAck on semaphores, against a master with one
// replica of its own (redistest.Replicated): paused (SIGSTOP), the replica
// cannot acknowledge.

// replicaPermits lists the permit ids of semaphore name on the replica.
func (e *env) replicaPermits(replica *redistest.Server, name string) []string {
	e.t.Helper()
	msg, err := replica.Do(e.ctx, "ZRANGE", e.base(name)+":permits", "0", "-1")
	if err != nil {
		e.t.Fatalf("ZRANGE on the replica: %v", err)
	}
	ids, err := msg.AsStrSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func waitCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := s.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stats["wait"]
}

// mustBeIdle fails the test unless semaphore s has no permit held and no
// one queued in Redis.
func (e *env) mustBeIdle(s *semaphore.Semaphore, what string) {
	e.t.Helper()
	if st := e.state(s); st.Held != 0 || st.Queued != 0 {
		e.t.Fatalf("%s: state %s, want nothing held or queued", what, stateString(st))
	}
}

// TestReplicaAckSemaphore: with rlock.WithReplicaAck on the Client, Acquire,
// Drain and permits handed over by a release return only once the replica
// has them.
func TestReplicaAckSemaphore(t *testing.T) {
	t.Parallel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	e := setupEnv(t, master)
	ack := rlock.WithReplicaAck(1, 2*time.Second)
	s1 := e.sem(e.client(ack), "ack", 1)
	s2 := e.sem(e.client(ack), "ack", 1)
	before := waitCalls(t, master)

	p1 := mustAcquire(t, s1, e.ctx, 1)
	// Replicas do not answer for keys before they are told; the permit
	// being there right after Acquire is the acknowledgement at work.
	first := e.replicaPermits(replica, "ack")
	if len(first) != 1 {
		t.Fatalf("permits on the replica after Acquire: %v, want one", first)
	}
	// Permits handed over by a release: the replica has the grantee's
	// permit, not the releaser's, when the waiter's Acquire returns.
	ch := goAcquire(s2, e.ctx, 1)
	e.waitQueued(s1, 1)
	mustRelease(t, s1, p1)
	p2 := receive(t, ch, prompt, "waiter").ctx
	if got := e.replicaPermits(replica, "ack"); len(got) != 1 || slices.Equal(got, first) {
		t.Fatalf("permits on the replica when the hand-off's Acquire returned: %v (the releaser's: %v), want the grantee's", got, first)
	}
	mustRelease(t, s2, p2)
	drained, n, err := s1.Drain(e.ctx)
	if err != nil || n != 1 {
		t.Fatalf("Drain = %d, %v; want 1 permit", n, err)
	}
	if got := e.replicaPermits(replica, "ack"); len(got) != 1 {
		t.Fatalf("permits on the replica after Drain: %v, want one", got)
	}
	mustRelease(t, s1, drained)
	if n := waitCalls(t, master) - before; n < 3 {
		t.Fatalf("%d WAIT calls, want at least 3 (Acquire, hand-off, Drain)", n)
	}
}

// TestReplicaAckSemaphoreNotReplicated: with the replica paused, Acquire,
// TryAcquire, Drain and a hand-off fail with ErrNotReplicated and leave no
// permit held and no one queued; with rlock.WithReplicaAckRetry Acquire
// waits and succeeds once the replica is back.
func TestReplicaAckSemaphoreNotReplicated(t *testing.T) {
	t.Parallel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	e := setupEnv(t, master)
	ack := rlock.WithReplicaAck(1, 100*time.Millisecond)
	c, other, plain := e.client(ack), e.client(ack), e.client()
	retrying := e.client(ack, rlock.WithReplicaAckRetry())

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = replica.Resume()
		}
	}()

	s := e.sem(c, "ack-fresh", 2)
	for _, call := range []struct {
		what string
		f    func() error
	}{
		{"Acquire", func() error { _, err := s.Acquire(e.ctx, 1); return err }},
		{"TryAcquire", func() error { _, err := s.TryAcquire(e.ctx, 2); return err }},
		{"Drain", func() error { _, _, err := s.Drain(e.ctx); return err }},
	} {
		start := time.Now()
		if err := call.f(); !errors.Is(err, semaphore.ErrNotReplicated) || !errors.Is(err, rlock.ErrNotReplicated) {
			t.Fatalf("%s with the replica paused = %v, want ErrNotReplicated", call.what, err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("%s failed after %v, before the ack timeout", call.what, d)
		}
		e.mustBeIdle(s, call.what+" that failed with ErrNotReplicated")
	}

	// Permits handed over by a release must be acknowledged too: the waiter
	// queued behind a holder (of a Client without WithReplicaAck) is handed
	// them by Release, which waits for no replica, and gives them back.
	held := mustAcquire(t, e.sem(plain, "ack-grant", 1), e.ctx, 1)
	ch := goAcquire(e.sem(other, "ack-grant", 1), e.ctx, 1)
	sg := e.sem(plain, "ack-grant", 1)
	e.waitQueued(sg, 1)
	mustRelease(t, sg, held)
	if r := receiveErr(t, ch, 5*time.Second, "waiter handed the permit"); !errors.Is(r.err, semaphore.ErrNotReplicated) {
		t.Fatalf("Acquire handed a permit with the replica paused = %v, want ErrNotReplicated", r.err)
	}
	e.mustBeIdle(sg, "a hand-off that failed with ErrNotReplicated")

	// The retry policy: Acquire waits while the replica is away.
	sr := e.sem(retrying, "ack-retry", 1)
	before := waitCalls(t, master)
	ch = goAcquire(sr, e.ctx, 1)
	waitFor(t, 5*time.Second, "the retrying Acquire to try twice", func() bool { return waitCalls(t, master) >= before+2 })
	stillBlocked(t, ch, 50*time.Millisecond, "retrying Acquire with the replica paused")
	resumed = true
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, sr, receive(t, ch, 5*time.Second, "retrying Acquire after the replica's return").ctx)
	e.mustBeIdle(sr, "after the retrying Acquire's Release")
}

// TestReplicaAckSemaphoreShortCtxIsTheDeadline: an Acquire or TryAcquire
// whose ctx ends before the acknowledgement timeout reports ctx's deadline,
// not ErrNotReplicated (the replica was never given its time), whether the
// ctx left no room for WAIT (replica healthy) or cut it short (replica
// paused); nothing is left held or queued.
func TestReplicaAckSemaphoreShortCtxIsTheDeadline(t *testing.T) {
	t.Parallel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	e := setupEnv(t, master)
	s := e.sem(e.client(rlock.WithReplicaAck(1, 2*time.Second)), "ack-short", 2)
	check := func(situation string, d time.Duration) {
		t.Helper()
		for _, call := range []struct {
			what string
			f    func(context.Context) error
		}{
			{"Acquire", func(ctx context.Context) error { _, err := s.Acquire(ctx, 1); return err }},
			{"TryAcquire", func(ctx context.Context) error { _, err := s.TryAcquire(ctx, 1); return err }},
		} {
			ctx, cancel := context.WithTimeout(e.ctx, d)
			err := call.f(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, semaphore.ErrNotReplicated) {
				t.Fatalf("%s, %s with a %v ctx = %v; want the deadline, not ErrNotReplicated", situation, call.what, d, err)
			}
			e.mustBeIdle(s, situation+", "+call.what)
		}
	}
	check("replica healthy", 5*time.Millisecond)
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	check("replica paused", 200*time.Millisecond)
}
