package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/rlock"
)

// A Mutex held by one Client, with two waiters of two other Clients queued
// one after the other: Inspect and `relock inspect` report the holder, its
// token (the one its Token returns), the queue in order and how long each
// waiter has waited.
func TestInspectMutex(t *testing.T) {
	e := newEnv(t)
	const name = "orders"
	c0, c1, c2 := e.client(), e.client(), e.client()
	m := c0.Mutex(name)
	lc, err := m.Lock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unlock(lc) }) // (and keeps lc reachable: a dropped one is released)
	token, err := m.Token(lc)
	require.NoError(t, err)
	queued := func() int { i, err := m.Inspect(e.ctx); return map[bool]int{true: i.Queued, false: -1}[err == nil] }
	var started, confirmed [2]time.Time
	for i, c := range []*rlock.Client{c1, c2} {
		w := c.Mutex(name)
		started[i] = time.Now()
		e.queue(func(ctx context.Context) (context.Context, error) { return w.Lock(ctx) }, w.Unlock)
		e.waitQueued(i+1, queued)
		confirmed[i] = time.Now()
		time.Sleep(arrivalGap) // real time between the arrivals, for their wait ages to differ
	}

	info, err := m.Inspect(e.ctx)
	inspected := time.Now()
	require.NoError(t, err)
	require.NotNil(t, info.Holder)
	require.Equal(t, c0.ID(), info.Holder.ClientID)
	require.Equal(t, int64(1), info.Holder.Count)
	require.Equal(t, token, info.Holder.Token, "the holder's token")
	require.GreaterOrEqual(t, info.Fence, token)
	require.False(t, info.Holder.Claim, "an acquisition's hold is no claim")
	require.Greater(t, info.Holder.LeaseLeft, time.Duration(0))
	require.Equal(t, 2, info.Queued)
	require.Len(t, info.Waiters, 2)
	for i, c := range []*rlock.Client{c1, c2} {
		w := info.Waiters[i]
		require.Equal(t, c.ID(), w.ClientID, "waiter %d", i)
		checkWaited(t, w.Waited, started[i], confirmed[i], inspected)
		require.Greater(t, w.LapsesIn, time.Duration(0))
	}
	require.Greater(t, info.Waiters[0].Waited, info.Waiters[1].Waited)

	v := e.cliView("inspect", name)
	require.Equal(t, "mutex", v.Kind)
	require.Len(t, v.Holders, 1)
	require.Equal(t, c0.ID(), v.Holders[0].Client)
	require.Equal(t, token, v.Holders[0].Token)
	require.False(t, v.Holders[0].Claim)
	require.Equal(t, info.Fence, v.Fence)
	require.Len(t, v.Waiters, 2)
	for i, c := range []*rlock.Client{c1, c2} {
		require.Equal(t, c.ID(), v.Waiters[i].Client)
		require.Equal(t, i+1, v.Waiters[i].Position)
		waited := time.Duration(v.Waiters[i].WaitedMS) * time.Millisecond
		checkWaited(t, waited, started[i], confirmed[i], inspected.Add(-time.Millisecond))
	}
	table := e.cli("inspect", name)
	t.Logf("relock inspect %s:\n%s", name, table)
	requireRow(t, table, c0.ID(), "1", "-", "1", itoa(token))
	requireRow(t, table, "1", c1.ID(), "1", "-", "-")
	requireRow(t, table, "2", c2.ID(), "1", "-", "-")
	require.Contains(t, table, "QUEUE: 2 waiting")
}

// A free, never used lock inspects as free with an empty queue; a name no
// lock may have is refused.
func TestInspectFreeAndInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	info, err := c.Mutex("free").Inspect(e.ctx)
	require.NoError(t, err)
	require.Nil(t, info.Holder)
	require.Empty(t, info.Waiters)
	_, err = c.Mutex("bad{name").Inspect(e.ctx)
	require.ErrorIs(t, err, rlock.ErrInvalidName)
	_, err = c.RWMutex("").Inspect(e.ctx)
	require.ErrorIs(t, err, rlock.ErrInvalidName)
	_, _, err = c.List(e.ctx, "a}", "", 10)
	require.ErrorIs(t, err, rlock.ErrInvalidName)
	_, _, err = c.List(e.ctx, "", "junk", 10)
	require.ErrorIs(t, err, rlock.ErrInvalidOption)
}

// force-unlock asks for the name: a wrong answer changes nothing, the name
// frees the lock, and so does -yes without asking.
func TestForceUnlock(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	m := c.Mutex("stuck")
	lc, err := m.TryLock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unlock(lc) })
	held := func() bool { ok, err := m.IsLocked(e.ctx); require.NoError(t, err); return ok }

	_, err = e.cliIn("other\n", "force-unlock", "stuck")
	require.ErrorContains(t, err, "not confirmed")
	require.True(t, held())
	out, err := e.cliIn("stuck\n", "force-unlock", "stuck")
	require.NoError(t, err)
	require.Contains(t, out, "Type the lock name")
	require.False(t, held())

	lc2, err := m.TryLock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unlock(lc2) })
	out, err = e.cliIn("", "force-unlock", "-yes", "stuck")
	require.NoError(t, err)
	require.Contains(t, out, `"stuck" was force-unlocked`)
	require.False(t, held())
}
