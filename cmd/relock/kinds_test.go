package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// An RWMutex written by one Client, a reader and a writer of two others
// queued behind it: the writer's exact token and the queue with its modes.
func TestInspectRWMutex(t *testing.T) {
	e := newEnv(t)
	const name = "catalog"
	c0, c1, c2 := e.client(), e.client(), e.client()
	rw := c0.RWMutex(name)
	lc, err := rw.Lock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rw.Unlock(lc) })
	token, err := rw.Token(lc)
	require.NoError(t, err)
	queued := func() int { i, err := rw.Inspect(e.ctx); return map[bool]int{true: i.Queued, false: -1}[err == nil] }
	r1, w2 := c1.RWMutex(name), c2.RWMutex(name)
	var started, confirmed [2]time.Time
	started[0] = time.Now()
	e.queue(func(ctx context.Context) (context.Context, error) { return r1.RLock(ctx) }, r1.RUnlock)
	e.waitQueued(1, queued)
	confirmed[0] = time.Now()
	time.Sleep(arrivalGap) // real time between the arrivals, for their wait ages to differ
	started[1] = time.Now()
	e.queue(func(ctx context.Context) (context.Context, error) { return w2.Lock(ctx) }, w2.Unlock)
	e.waitQueued(2, queued)
	confirmed[1] = time.Now()

	info, err := rw.Inspect(e.ctx)
	inspected := time.Now()
	require.NoError(t, err)
	require.NotNil(t, info.Writer)
	require.Equal(t, c0.ID(), info.Writer.ClientID)
	require.Equal(t, token, info.Writer.Token)
	require.Empty(t, info.Readers)
	require.Len(t, info.Waiters, 2)
	for i, want := range []struct {
		c    *rlock.Client
		mode string
	}{{c1, "read"}, {c2, "write"}} {
		require.Equal(t, want.c.ID(), info.Waiters[i].ClientID)
		require.Equal(t, want.mode, info.Waiters[i].Mode)
		checkWaited(t, info.Waiters[i].Waited, started[i], confirmed[i], inspected)
	}

	v := e.cliView("inspect", "-kind", "rw", name)
	require.Len(t, v.Holders, 1)
	require.Equal(t, holderView{Client: c0.ID(), Owner: info.Writer.Owner, Mode: "write", Count: 1, Token: token, LeaseMS: v.Holders[0].LeaseMS}, v.Holders[0])
	require.Equal(t, []string{c1.ID(), c2.ID()}, []string{v.Waiters[0].Client, v.Waiters[1].Client})
	require.Equal(t, []string{"read", "write"}, []string{v.Waiters[0].Mode, v.Waiters[1].Mode})
	table := e.cli("inspect", "-kind", "rw", name)
	t.Logf("relock inspect -kind rw %s:\n%s", name, table)
	requireRow(t, table, c0.ID(), "1", "write", "1", itoa(token))
	requireRow(t, table, "1", c1.ID(), "1", "read")
	requireRow(t, table, "2", c2.ID(), "1", "write")

	// The reader, once the writer is gone: it shares the last writer's token.
	_ = rw.Unlock(lc)
	require.Eventually(t, func() bool {
		i, err := rw.Inspect(e.ctx)
		return err == nil && i.Writer == nil && len(i.Readers) == 1 && i.Readers[0].ClientID == c1.ID() && i.Readers[0].Token == token && i.Readers[0].Count == 1 && len(i.Waiters) == 1
	}, 10*time.Second, 10*time.Millisecond)
}

// A semaphore of limit 2 held whole by one Client, with waiters for 1 and 2
// permits from two others.
func TestInspectSemaphore(t *testing.T) {
	e := newEnv(t)
	const name = "pool"
	c0, c1, c2 := e.client(), e.client(), e.client()
	s := semaphore.New(c0, name, semaphore.WithLimit(2))
	pc, err := s.Acquire(e.ctx, 2)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Release(pc) })
	queued := func() int { i, err := s.Inspect(e.ctx); return map[bool]int{true: i.Queued, false: -1}[err == nil] }
	var started, confirmed [2]time.Time
	for i, c := range []*rlock.Client{c1, c2} {
		w := semaphore.New(c, name, semaphore.WithLimit(2))
		n := int64(i + 1)
		started[i] = time.Now()
		e.queue(func(ctx context.Context) (context.Context, error) { return w.Acquire(ctx, n) }, w.Release)
		e.waitQueued(i+1, queued)
		confirmed[i] = time.Now()
		time.Sleep(arrivalGap) // real time between the arrivals, for their wait ages to differ
	}

	info, err := s.Inspect(e.ctx)
	inspected := time.Now()
	require.NoError(t, err)
	require.Equal(t, int64(2), info.Limit)
	require.Equal(t, int64(2), info.Used)
	require.Len(t, info.Holders, 1)
	require.Equal(t, c0.ID(), info.Holders[0].ClientID)
	require.Equal(t, int64(2), info.Holders[0].Count)
	require.Greater(t, info.Holders[0].LeaseLeft, time.Duration(0))
	require.Len(t, info.Waiters, 2)
	for i, c := range []*rlock.Client{c1, c2} {
		require.Equal(t, c.ID(), info.Waiters[i].ClientID)
		require.Equal(t, int64(i+1), info.Waiters[i].Permits)
		checkWaited(t, info.Waiters[i].Waited, started[i], confirmed[i], inspected)
	}

	v := e.cliView("inspect", "-kind", "semaphore", name)
	require.Equal(t, int64(2), *v.Limit)
	require.Equal(t, c0.ID(), v.Holders[0].Client)
	require.Equal(t, int64(2), v.Holders[0].Count)
	require.Equal(t, []int64{1, 2}, []int64{v.Waiters[0].Permits, v.Waiters[1].Permits})
	require.Equal(t, []string{c1.ID(), c2.ID()}, []string{v.Waiters[0].Client, v.Waiters[1].Client})
	table := e.cli("inspect", "-kind", "semaphore", name)
	t.Logf("relock inspect -kind semaphore %s:\n%s", name, table)
	require.Contains(t, table, "limit 2  used 2")
	requireRow(t, table, c0.ID(), holdID(info.Holders[0].Owner), "-", "2")
	requireRow(t, table, "1", c1.ID())
	requireRow(t, table, "2", c2.ID())
}

// List finds every kind by name prefix, across SCAN steps, with the
// Client's key prefix only; so does `relock list`.
func TestList(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	m := c.Mutex("app/a")
	lm, err := m.TryLock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unlock(lm) })
	rw := c.RWMutex("app/b")
	lr, err := rw.RLock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rw.RUnlock(lr) })
	s := semaphore.New(c, "app*c", semaphore.WithLimit(3))
	ls, err := s.Acquire(e.ctx, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Release(ls) })
	other := c.Mutex("zzz")
	lo, err := other.TryLock(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Unlock(lo) })

	var got []rlock.Listed
	cursor, steps := "", 0
	for {
		page, next, err := c.List(e.ctx, "app", cursor, 1)
		require.NoError(t, err)
		got, cursor, steps = append(got, page...), next, steps+1
		if cursor == "" {
			break
		}
	}
	want := []rlock.Listed{{Name: "app*c", Kind: "semaphore"}, {Name: "app/a", Kind: "mutex"}, {Name: "app/b", Kind: "rw"}}
	require.ElementsMatch(t, want, dedupe(got))
	out := e.cli("list", "app")
	t.Logf("relock list app:\n%s", out)
	for _, l := range want {
		requireRow(t, out, l.Kind, l.Name)
	}
	require.NotContains(t, out, "zzz")
	require.Contains(t, e.cli("list"), "zzz")
	require.NotContains(t, e.cli("list", "app*"), "app/a", "a glob character in the prefix is a plain character")
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
