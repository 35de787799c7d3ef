package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestReplicaAckQuorum: with WithReplicaAck in a Quorum's ClientOptions, a
// master's vote counts only when its replica acknowledged it. Three masters,
// each with a replica of its own: with every replica following, Lock returns
// with the lock on every master and replica; with one replica paused, the
// other two votes make the majority and the third is given back; with two
// paused, Lock and TryLock fail with ErrNotReplicated and leave nothing on
// any master; with WithReplicaAckRetry, Lock waits and succeeds once a
// replica is back.
func TestReplicaAckQuorum(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reps := make([]*redistest.Replicated, 3)
	for i := range reps {
		reps[i] = redistest.NewReplicated(t, 1)
	}
	newQuorum := func(opts ...rlock.Option) *rlock.Quorum {
		t.Helper()
		clients := make([]rueidis.Client, len(reps))
		for i, r := range reps {
			clients[i] = redistest.Client(t, r.Master)
		}
		q, err := rlock.NewQuorumWith(rlock.QuorumOptions{ClientOptions: opts}, clients...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	const name = "ack-quorum"
	key := rlock.DefaultQuorumKeyPrefix + ":{" + name + "}"
	onMasters := func() (n int, on []bool) {
		for _, r := range reps {
			on = append(on, exists(t, r.Master, key))
			if on[len(on)-1] {
				n++
			}
		}
		return n, on
	}

	qm := newQuorum(rlock.WithReplicaAck(1, 2*time.Second)).Mutex(name)
	l, err := qm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reps {
		if !exists(t, r.Replicas[0], key) {
			t.Fatalf("Lock returned before the replica of master %d had its vote", i)
		}
	}
	if err := qm.Unlock(l); err != nil {
		t.Fatal(err)
	}

	fast := newQuorum(rlock.WithReplicaAck(1, 100*time.Millisecond)).Mutex(name)
	resume0 := pauseReplica(t, reps[0].Replicas[0])
	l, err = fast.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with one replica of three paused: %v", err)
	}
	eventually(t, 2*time.Second, "the unacknowledged vote was not given back", func() bool {
		_, on := onMasters()
		return !on[0] && on[1] && on[2]
	})
	if v, err := fast.Validity(l); err != nil || v <= 0 {
		t.Fatalf("Validity = %v, %v", v, err)
	}
	if err := fast.Unlock(l); err != nil {
		t.Fatal(err)
	}

	resume1 := pauseReplica(t, reps[1].Replicas[0])
	for _, call := range []struct {
		what string
		f    func(context.Context, ...rlock.LockOption) (context.Context, error)
	}{{"Lock", fast.Lock}, {"TryLock", fast.TryLock}} {
		if _, err := call.f(ctx); !errors.Is(err, rlock.ErrNotReplicated) {
			t.Fatalf("%s with two replicas of three paused = %v, want ErrNotReplicated", call.what, err)
		} else {
			t.Log(err)
		}
		eventually(t, 2*time.Second, "a "+call.what+" that failed with ErrNotReplicated left votes", func() bool {
			n, _ := onMasters()
			return n == 0
		})
	}

	// The retry policy: Lock waits while too few replicas follow.
	retrying := newQuorum(rlock.WithReplicaAck(1, 100*time.Millisecond), rlock.WithReplicaAckRetry()).Mutex(name)
	before := waitCalls(t, reps[0].Master)
	got := make(chan error, 1)
	go func() {
		l, err := retrying.Lock(ctx)
		if err == nil {
			err = retrying.Unlock(l)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the retrying Lock never tried twice", func() bool {
		return waitCalls(t, reps[0].Master) >= before+2
	})
	select {
	case err := <-got:
		t.Fatalf("the retrying Lock returned while two replicas were away: %v", err)
	default:
	}
	resume1()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the retrying Lock did not succeed within 5s of a replica's return")
	}
	resume0()

	// A bounded wait ends with the cause.
	pauseReplica(t, reps[0].Replicas[0])
	pauseReplica(t, reps[2].Replicas[0])
	if _, err := retrying.Lock(ctx, rlock.WithWaitTimeout(300*time.Millisecond)); !errors.Is(err, rlock.ErrNotReplicated) {
		t.Fatalf("retrying Lock with a wait timeout and two replicas paused = %v, want ErrNotReplicated", err)
	}
	eventually(t, 2*time.Second, "the retrying Lock left votes", func() bool {
		n, _ := onMasters()
		return n == 0
	})
}
