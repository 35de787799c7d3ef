package rlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// Tests of WithReplicaAck on the RWMutex, against a master with one replica
// of its own (redistest.Replicated, no Sentinels): paused (SIGSTOP), the
// replica cannot acknowledge.

// rwKey is a key of the RWMutex name under the default prefix: part "" is
// the writer hash, ":r" the readers zset, ":r:n" the readers' counts,
// ":queue" the waiters.
func rwKey(name, part string) string { return "rlock:{" + name + "}:rw" + part }

// strings returns the reply to args on s as strings.
func replyStrings(t *testing.T, s *redistest.Server, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := s.Do(ctx, args...)
	if err != nil {
		t.Fatalf("%v on %s: %v", args, s, err)
	}
	vals, err := msg.AsStrSlice()
	if err != nil {
		t.Fatalf("%v on %s: %v", args, s, err)
	}
	return vals
}

func zcard(t *testing.T, s *redistest.Server, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := s.Do(ctx, "ZCARD", key)
	if err != nil {
		t.Fatalf("ZCARD %s on %s: %v", key, s, err)
	}
	n, _ := msg.AsInt64()
	return n
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

// pauseReplica stops s (SIGSTOP) until the returned resume is called, or
// the test ends.
func pauseReplica(t *testing.T, s *redistest.Server) (resume func()) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		t.Helper()
		if !resumed {
			resumed = true
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		if !resumed {
			_ = s.Resume()
		}
	})
	return resume
}

// TestReplicaAckRWMutex: with WithReplicaAck, every way of getting an
// RWMutex hold returns only once the replica has it: a read lock, its
// re-entry, a write lock granted by the last reader's release, a read lock
// taken under it (a downgrade), and read locks granted by a write release.
func TestReplicaAckRWMutex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	opts := []rlock.Option{rlock.WithReplicaAck(1, 2*time.Second)}
	rw1 := newAckClient(t, master, opts...).RWMutex("ack-rw")
	rw2 := newAckClient(t, master, opts...).RWMutex("ack-rw")

	before := waitCalls(t, master)
	readCtx, err := rw1.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Replicas do not answer for keys before they are told; the keys being
	// there right after the call returned is the acknowledgement at work.
	if !exists(t, replica, rwKey("ack-rw", ":r")) {
		t.Fatal("RLock returned before the replica had the read hold")
	}
	if _, err := rw1.RLock(readCtx); err != nil { // re-entry
		t.Fatal(err)
	}
	if got := replyStrings(t, replica, "HVALS", rwKey("ack-rw", ":r:n")); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("read hold count on the replica after a re-entry = %v, want [2]", got)
	}

	// A writer queued behind the reader is granted the lock by its release.
	got := make(chan error, 1)
	go func() {
		w, err := rw2.Lock(ctx)
		if err != nil {
			got <- err
			return
		}
		if !exists(t, replica, rwKey("ack-rw", "")) {
			err = errors.New("a write lock granted by a release was not on the replica when Lock returned")
		}
		// A downgrade: the read lock under the write lock.
		r, rerr := rw2.RLock(w)
		if rerr == nil && zcard(t, replica, rwKey("ack-rw", ":r")) != 1 {
			rerr = errors.New("a read lock taken under the write lock was not on the replica when RLock returned")
		}
		err = errors.Join(err, rerr, rw2.Unlock(w))
		if rerr == nil {
			err = errors.Join(err, rw2.RUnlock(r))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the writer never queued", func() bool {
		return zcard(t, master, rwKey("ack-rw", ":queue")) >= 1
	})
	for range 2 {
		if err := rw1.RUnlock(readCtx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// Readers queued behind a writer are granted the lock by its release.
	w, err := rw1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		r, err := rw2.RLock(ctx)
		if err == nil {
			if !exists(t, replica, rwKey("ack-rw", ":r")) {
				err = errors.New("a read lock granted by a release was not on the replica when RLock returned")
			}
			err = errors.Join(err, rw2.RUnlock(r))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the reader never queued", func() bool {
		return zcard(t, master, rwKey("ack-rw", ":queue")) >= 1
	})
	if exists(t, replica, rwKey("ack-rw", ":r")) {
		t.Fatal("the replica has a reader before the write release")
	}
	if err := rw1.Unlock(w); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// One WAIT per acquisition at least: a read, its re-entry, a granted
	// write, a downgrade, a write, a granted read.
	if n := waitCalls(t, master) - before; n < 6 {
		t.Fatalf("%d WAIT calls, want at least 6", n)
	}
}

// TestReplicaAckRWMutexNotReplicated: with the replica paused, every RWMutex
// acquisition fails with ErrNotReplicated and leaves nothing held: first
// acquisitions (read and write, blocking or not), re-entries (the hold count
// stays as it was), a downgrade, and a lock granted by a release. With
// WithReplicaAckRetry, RLock, Lock and a downgrade wait and succeed once the
// replica is back.
func TestReplicaAckRWMutexNotReplicated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	ack := []rlock.Option{rlock.WithReplicaAck(1, 100*time.Millisecond)}
	c := newAckClient(t, master, ack...)
	other := newAckClient(t, master, ack...)
	retrying := newAckClient(t, master, append(ack, rlock.WithReplicaAckRetry())...)
	held := func(name string) bool {
		return exists(t, master, rwKey(name, "")) || exists(t, master, rwKey(name, ":r")) || exists(t, master, rwKey(name, ":r:n"))
	}

	// Holds taken while the replica follows.
	readCtx, err := c.RWMutex("ack-rw-r").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeCtx, err := c.RWMutex("ack-rw-w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume := pauseReplica(t, replica)

	// First acquisitions.
	fresh := c.RWMutex("ack-rw-fresh")
	for _, call := range []struct {
		what string
		f    func(context.Context, ...rlock.LockOption) (context.Context, error)
	}{{"RLock", fresh.RLock}, {"TryRLock", fresh.TryRLock}, {"Lock", fresh.Lock}, {"TryLock", fresh.TryLock}} {
		start := time.Now()
		if _, err := call.f(ctx); !errors.Is(err, rlock.ErrNotReplicated) {
			t.Fatalf("%s with the replica paused = %v, want ErrNotReplicated", call.what, err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("%s failed after %v, before the ack timeout", call.what, d)
		}
		if held("ack-rw-fresh") {
			t.Fatalf("a %s that failed with ErrNotReplicated left a hold", call.what)
		}
	}

	// Re-entries are taken back.
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		lock  func(context.Context, ...rlock.LockOption) (context.Context, error)
		count func(context.Context) (int, error)
	}{
		{"read", readCtx, c.RWMutex("ack-rw-r").RLock, c.RWMutex("ack-rw-r").HoldCount},
		{"write", writeCtx, c.RWMutex("ack-rw-w").Lock, c.RWMutex("ack-rw-w").HoldCount},
	} {
		if _, err := tc.lock(tc.ctx); !errors.Is(err, rlock.ErrNotReplicated) {
			t.Fatalf("%s re-entry with the replica paused = %v, want ErrNotReplicated", tc.name, err)
		}
		if n, err := tc.count(tc.ctx); err != nil || n != 1 {
			t.Fatalf("%s hold count after a re-entry not acknowledged = %d, %v; want 1", tc.name, n, err)
		}
		if err := context.Cause(tc.ctx); err != nil {
			t.Fatalf("the %s hold ended: %v", tc.name, err)
		}
	}
	if err := c.RWMutex("ack-rw-r").RUnlock(readCtx); err != nil {
		t.Fatal(err)
	}
	if held("ack-rw-r") {
		t.Fatal("the read lock is still held after its one RUnlock")
	}

	// A downgrade is given back.
	if _, err := c.RWMutex("ack-rw-w").RLock(writeCtx); !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("RLock under the write lock with the replica paused = %v, want ErrNotReplicated", err)
	}
	if exists(t, master, rwKey("ack-rw-w", ":r")) {
		t.Fatal("a downgrade that failed with ErrNotReplicated left a read hold")
	}

	// A lock granted by a release must be acknowledged too: the reader
	// queued behind the writer is granted the lock by Unlock (which waits
	// for no replica), and gives it back.
	got := make(chan error, 1)
	go func() {
		_, err := other.RWMutex("ack-rw-w").RLock(ctx)
		got <- err
	}()
	eventually(t, 5*time.Second, "the reader never queued", func() bool {
		return zcard(t, master, rwKey("ack-rw-w", ":queue")) >= 1
	})
	if err := c.RWMutex("ack-rw-w").Unlock(writeCtx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("RLock granted by a release with the replica paused = %v, want ErrNotReplicated", err)
	}
	if held("ack-rw-w") {
		t.Fatal("a granted RLock that failed with ErrNotReplicated left a hold")
	}

	// The retry policy: RLock, then Lock, wait while the replica is away.
	for _, write := range []bool{false, true} {
		rw := retrying.RWMutex("ack-rw-retry")
		before := waitCalls(t, master)
		go func() {
			var l context.Context
			var err error
			if write {
				l, err = rw.Lock(ctx)
			} else {
				l, err = rw.RLock(ctx)
			}
			if err == nil && write {
				err = rw.Unlock(l)
			} else if err == nil {
				err = rw.RUnlock(l)
			}
			got <- err
		}()
		eventually(t, 5*time.Second, "the retrying call never tried twice", func() bool {
			return waitCalls(t, master) >= before+2
		})
		select {
		case err := <-got:
			t.Fatalf("the retrying call (write %v) returned while the replica was away: %v", write, err)
		default:
		}
		resume()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the retrying call (write %v) did not succeed within 5s of the replica's return", write)
		}
		if held("ack-rw-retry") {
			t.Fatal("the retrying call left a hold after its unlock")
		}
		if !write {
			resume = pauseReplica(t, replica)
		}
	}

	// A downgrade with the retry policy repeats WAIT until the replica is
	// back.
	rw := retrying.RWMutex("ack-rw-retry")
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume = pauseReplica(t, replica)
	before := waitCalls(t, master)
	go func() {
		r, err := rw.RLock(w)
		if err == nil {
			err = rw.RUnlock(r)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the retrying downgrade never waited twice", func() bool {
		return waitCalls(t, master) >= before+2
	})
	select {
	case err := <-got:
		t.Fatalf("the retrying downgrade returned while the replica was away: %v", err)
	default:
	}
	resume()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the retrying downgrade did not succeed within 5s of the replica's return")
	}
	if err := rw.Unlock(w); err != nil {
		t.Fatal(err)
	}
	if held("ack-rw-retry") {
		t.Fatal("the downgrade left a hold after its unlocks")
	}
}

// A re-entry with WithLease that too few replicas acknowledge is taken back
// (ErrNotReplicated) and leaves the outer hold as it was: renewed by the
// watchdog, not turned into a hold of the re-entry's fixed lease that then
// expires.
func TestUnackedReentryWithLeaseKeepsTheOuterHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := redistest.NewReplicated(t, 1)
	c := newAckClient(t, rep.Master, rlock.WithReplicaAck(1, 100*time.Millisecond), rlock.WithWatchdogTimeout(time.Second))
	for _, kind := range []string{"mutex", "rw-write", "rw-read"} {
		t.Run(kind, func(t *testing.T) {
			var lock func(context.Context, ...rlock.LockOption) (context.Context, error)
			var count func(context.Context) (int, error)
			var unlock func(context.Context) error
			switch kind {
			case "mutex":
				m := c.Mutex("unacked-" + kind)
				lock, count, unlock = m.Lock, m.HoldCount, m.Unlock
			case "rw-write":
				rw := c.RWMutex("unacked-" + kind)
				lock, count, unlock = rw.Lock, rw.HoldCount, rw.Unlock
			case "rw-read":
				rw := c.RWMutex("unacked-" + kind)
				lock, count, unlock = rw.RLock, rw.HoldCount, rw.RUnlock
			}
			outer, err := lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			resume := pauseReplica(t, rep.Replicas[0])
			_, err = lock(outer, rlock.WithLease(400*time.Millisecond))
			resume()
			if !errors.Is(err, rlock.ErrNotReplicated) {
				t.Fatalf("re-entry with WithLease, replica paused: %v; want ErrNotReplicated", err)
			}
			if n, err := count(outer); err != nil || n != 1 {
				t.Fatalf("hold count after the re-entry was taken back: %d, %v; want 1", n, err)
			}
			// Past the re-entry's lease and two watchdog timeouts: a hold
			// left on the 400ms lease is lost by then.
			select {
			case <-outer.Done():
				t.Fatalf("the outer hold ended after the re-entry was taken back: %v", context.Cause(outer))
			case <-time.After(2500 * time.Millisecond):
			}
			if err := unlock(outer); err != nil {
				t.Fatalf("unlock of the outer hold: %v", err)
			}
		})
	}
}
