package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// A read hold and permits handed to a waiter for its claim window show as a
// claim (`claim` in JSON, CLAIM column) until the waiter's Client extends
// them, which a gate holds back here; then as holds of the whole lease.
func TestInspectClaimedReaderAndPermit(t *testing.T) {
	const window = 9 * time.Second // the extension is due 3s in: 6s to look
	for _, kind := range []string{"rw", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			name := "claimed-" + kind
			key := e.prefix + ":{" + name + "}"
			gate := redistest.NewGate(redistest.Client(t, e.srv), key)
			t.Cleanup(gate.Open)
			grantee, err := rlock.New(gate, rlock.WithKeyPrefix(e.prefix), rlock.WithClaimWindow(window))
			require.NoError(t, err)
			t.Cleanup(func() { _ = grantee.Close() })
			handOff(t, e, kind, name, grantee)
			select {
			case <-gate.Reached():
			case <-time.After(10 * time.Second):
				t.Fatal("the claim extension was never sent")
			}
			v := e.cliView("inspect", "-kind", kind, name)
			require.Len(t, v.Holders, 1)
			require.Equal(t, grantee.ID(), v.Holders[0].Client)
			require.True(t, v.Holders[0].Claim, "a hold handed over, not yet extended")
			require.LessOrEqual(t, v.Holders[0].LeaseMS, window.Milliseconds())
			table := e.cli("inspect", "-kind", kind, name)
			t.Logf("relock inspect -kind %s %s:\n%s", kind, name, table)
			requireRow(t, table, grantee.ID(), holdID(v.Holders[0].Owner), dash(v.Holders[0].Mode), "1")
			require.Contains(t, table, "claim\n", "the CLAIM column of the holder's row")
			gate.Open()
			require.Eventually(t, func() bool { return !e.cliView("inspect", "-kind", kind, name).Holders[0].Claim },
				10*time.Second, 50*time.Millisecond, "the claim extended")
		})
	}
}

// handOff has another Client hold the lock of kind (the write lock of an
// RWMutex, the one permit of a semaphore), queues grantee for a read hold
// or the permit, and releases, handing it to grantee; grantee keeps it
// until the test ends.
func handOff(t *testing.T, e *env, kind, name string, grantee *rlock.Client) {
	t.Helper()
	holder := e.client()
	if kind == "rw" {
		rw := holder.RWMutex(name)
		lc, err := rw.Lock(e.ctx)
		require.NoError(t, err)
		w := grantee.RWMutex(name)
		got := e.queue(func(ctx context.Context) (context.Context, error) { return w.RLock(ctx) }, w.RUnlock)
		queued := func() int { i, err := rw.Inspect(e.ctx); return map[bool]int{true: i.Queued, false: -1}[err == nil] }
		e.waitQueued(1, queued)
		require.NoError(t, rw.Unlock(lc))
		granted(t, got)
		return
	}
	s := semaphore.New(holder, name, semaphore.WithLimit(1))
	pc, err := s.Acquire(e.ctx, 1)
	require.NoError(t, err)
	w := semaphore.New(grantee, name, semaphore.WithLimit(1))
	got := e.queue(func(ctx context.Context) (context.Context, error) { return w.Acquire(ctx, 1) }, w.Release)
	queued := func() int { i, err := s.Inspect(e.ctx); return map[bool]int{true: i.Queued, false: -1}[err == nil] }
	e.waitQueued(1, queued)
	require.NoError(t, s.Release(pc))
	granted(t, got)
}

func granted(t *testing.T, got <-chan struct{}) {
	t.Helper()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the hand-off to the grantee did not arrive")
	}
}
