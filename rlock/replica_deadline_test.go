package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestReplicaAckShortCtxIsTheDeadline: with WithReplicaAck, an acquisition
// whose ctx ends before the acknowledgement timeout reports ctx's deadline,
// not ErrNotReplicated: the replicas were never given their time. That holds
// for a ctx too short for any WAIT (the replica healthy) and for one that cut
// the WAIT short (the replica paused), for the Mutex and both RWMutex modes,
// blocking or not; the acquisition is given back either way.
func TestReplicaAckShortCtxIsTheDeadline(t *testing.T) {
	t.Parallel()
	rep := redistest.NewReplicated(t, 1)
	master, replica := rep.Master, rep.Replicas[0]
	c := newAckClient(t, master, rlock.WithReplicaAck(1, 2*time.Second))
	const name = "ack-short"

	type call struct {
		what string
		f    func(context.Context, ...rlock.LockOption) (context.Context, error)
	}
	m, rw := c.Mutex(name), c.RWMutex(name+"-rw")
	calls := []call{{"Lock", m.Lock}, {"TryLock", m.TryLock}, {"RLock", rw.RLock}, {"TryRLock", rw.TryRLock}, {"RWMutex.Lock", rw.Lock}}
	held := func() bool {
		return exists(t, master, "rlock:{"+name+"}") || exists(t, master, rwKey(name+"-rw", "")) || exists(t, master, rwKey(name+"-rw", ":r"))
	}
	check := func(situation string, d time.Duration) {
		t.Helper()
		for _, cl := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := time.Now()
			_, err := cl.f(ctx)
			took := time.Since(start)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rlock.ErrNotReplicated) {
				t.Fatalf("%s, %s with a %v ctx = %v; want the deadline, not ErrNotReplicated", situation, cl.what, d, err)
			}
			if took > d+time.Second {
				t.Fatalf("%s, %s with a %v ctx returned after %v", situation, cl.what, d, took)
			}
			eventually(t, 5*time.Second, situation+", "+cl.what+" left a hold", func() bool { return !held() })
		}
	}
	// Healthy replica, a ctx with no room for WAIT's margin.
	check("replica healthy", 5*time.Millisecond)
	// Replica paused: the WAIT is cut short by the ctx, well before the 2s
	// acknowledgement timeout.
	resume := pauseReplica(t, replica)
	check("replica paused", 200*time.Millisecond)
	resume()

	// The acknowledgement timeout (not a ctx) running out is still a
	// replication failure.
	resume = pauseReplica(t, replica)
	defer resume()
	short := newAckClient(t, master, rlock.WithReplicaAck(1, 100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := short.Mutex(name).TryLock(ctx); !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("TryLock with the replica paused and a long ctx = %v, want ErrNotReplicated", err)
	}
}
