package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// lapseGate fails every renewal (not run) once armed, and holds each release
// back until gate is closed.
type lapseGate struct {
	rueidis.Client
	armed atomic.Bool
	gate  chan struct{}
}

func (z *lapseGate) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	rs := make([]rueidis.RedisResult, len(multi))
	for i, c := range multi {
		rs[i] = z.Do(ctx, c)
	}
	return rs
}

func (z *lapseGate) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if z.armed.Load() {
		switch ftScript(cmd.Commands()) {
		case "other":
			return rueidis.NewErrorResult(errFtLost)
		case "release":
			<-z.gate
		}
	}
	return z.Client.Do(ctx, cmd)
}

// An inner Unlock (of a re-entered hold) that reaches Redis as the hold
// runs out here (its renewals failed) re-sets the lease of the level it
// leaves, which no one holds any more: the lock is given back, rather than
// held by no one for a whole lease. (It was left held for the 3s lease,
// and another Client waited that long.)
func TestInnerUnlockAsTheHoldLapsesGivesTheLockBack(t *testing.T) {
	e := ftNewEnv(t)
	z := &lapseGate{Client: ftFaulty(t, e.srv).Client, gate: make(chan struct{})}
	const lease = 3 * time.Second
	c := e.clientOn(z, rlock.WithWatchdogTimeout(lease), rlock.WithUnlockTimeout(10*time.Second))
	const name = "inner-unlock-lapse"
	m := c.Mutex(name)
	outer := ftLock(t, e.ctx, m)
	inner := ftLock(t, outer, m)
	z.armed.Store(true)
	// The release reaches Redis once the hold has lapsed here.
	go func() { <-outer.Done(); close(z.gate) }()
	if err := m.Unlock(inner); err != nil {
		t.Fatalf("inner Unlock: %v", err)
	}
	z.armed.Store(false)
	if cause := context.Cause(outer); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Fatalf("the hold ended with %v, want ErrLeaseLost", cause)
	}
	// The release left one level, its lease set afresh: about 3s.
	eventually(t, lease/2, "the level left in Redis given back", func() bool { return len(e.owners(name)) == 0 })
	start := time.Now()
	other := e.client().Mutex(name)
	lc, err := other.Lock(e.ctx)
	if err != nil {
		t.Fatalf("another Client's Lock: %v", err)
	}
	if waited := time.Since(start); waited > lease/2 {
		t.Errorf("another Client waited %v for a lock no one held", waited)
	}
	if err := other.Unlock(lc); err != nil {
		t.Fatal(err)
	}
}
