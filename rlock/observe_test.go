package rlock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// countingObserver counts the events an Observer is told.
type countingObserver struct {
	acquired, released, ended atomic.Int64
	waited, local, handOff    atomic.Int64
	failed                    [5]atomic.Int64
}

func (o *countingObserver) Acquired(_ context.Context, e *rlock.Event) {
	if e.Err != nil {
		o.failed[e.Class].Add(1)
		return
	}
	o.acquired.Add(1)
	if e.Waited {
		o.waited.Add(1)
	}
	switch e.Via {
	case rlock.ViaLocalPass:
		o.local.Add(1)
	case rlock.ViaHandOff:
		o.handOff.Add(1)
	}
}

func (o *countingObserver) Released(context.Context, *rlock.Event) { o.released.Add(1) }
func (o *countingObserver) HoldEnded(*rlock.Event)                 { o.ended.Add(1) }

// TestStatsContended runs a known number of Lock/Unlock on one lock from
// goroutines of two Clients, then checks that Stats and the Observer count
// them: every Lock an acquisition, every Unlock a release, hand-offs both
// local and through Redis, nothing held or waiting at the end, and a failed
// TryLock counted as locked.
func TestStatsContended(t *testing.T) {
	const clients, perClient, rounds = 2, 4, 25
	srv := redistest.New(t)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	obs := make([]*countingObserver, clients)
	cs := make([]*rlock.Client, clients)
	for i := range cs {
		obs[i] = &countingObserver{}
		c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(prefix), rlock.WithObserver(obs[i]))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range clients * perClient {
		m := cs[i%clients].Mutex("stats")
		wg.Go(func() {
			for range rounds {
				lockCtx, err := m.Lock(ctx)
				if !assertNoError(t, err) {
					return
				}
				assertNoError(t, m.Unlock(lockCtx))
			}
		})
	}
	wg.Wait()

	held, err := cs[0].Mutex("stats").Lock(ctx)
	require.NoError(t, err)
	_, err = cs[1].Mutex("stats").TryLock(ctx)
	require.ErrorIs(t, err, rlock.ErrLocked)
	require.NoError(t, cs[0].Mutex("stats").Unlock(held))

	var total rlock.Stats
	for i, c := range cs {
		s := c.Stats()
		t.Logf("client %d: %+v (mean wait %v, hold %v, local pass %v, hand-off %v)", i, s, s.MeanWait(), s.MeanHold(), s.MeanLocalPass(), s.MeanHandOff())
		total.Acquisitions += s.Acquisitions
		total.LocalPasses += s.LocalPasses
		total.HandOffs += s.HandOffs
		total.Released += s.Released
		total.Locked += s.Locked
		require.Zero(t, s.Held, "holds left")
		require.Zero(t, s.Waiting, "waits left")
		require.Zero(t, s.LeaseLost+s.Abandoned+s.Unavailable+s.Permission+s.OtherErrors)
		require.Equal(t, s.Acquisitions, obs[i].acquired.Load())
		require.Equal(t, s.LocalPasses, obs[i].local.Load())
		require.Equal(t, s.HandOffs, obs[i].handOff.Load())
		require.Equal(t, s.Locked, obs[i].failed[rlock.ClassLocked].Load())
		require.Equal(t, s.Acquisitions, obs[i].released.Load(), "one Unlock per Lock")
		require.Equal(t, s.HoldsEnded, obs[i].ended.Load())
		if s.Waited > 0 {
			require.Positive(t, s.WaitTotal)
		}
	}
	const locks = clients*perClient*rounds + 1
	require.EqualValues(t, locks, total.Acquisitions)
	require.EqualValues(t, locks, total.Released, "every hold ended by its Unlock")
	require.EqualValues(t, 1, total.Locked)
	require.Positive(t, total.LocalPasses+total.HandOffs, "no hand-off in a contended run")
}

// TestStatsKinds checks that RWMutex and semaphore calls are counted too, and
// that a held lock and a waiting call show in the gauges.
func TestStatsKinds(t *testing.T) {
	srv := redistest.New(t)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	obs := &countingObserver{}
	c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(prefix), rlock.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	rw := c.RWMutex("kinds")
	r1, err := rw.RLock(ctx)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx)
	require.ErrorIs(t, err, rlock.ErrLocked)
	waited := make(chan error, 1)
	go func() {
		w, err := rw.Lock(ctx)
		if err == nil {
			err = rw.Unlock(w)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return c.Stats().Waiting == 1 }, 10e9, 1e6)
	require.EqualValues(t, 1, c.Stats().Held)
	require.NoError(t, rw.RUnlock(r1))
	require.NoError(t, <-waited)

	sem := semaphore.New(c, "kinds", semaphore.WithLimit(1))
	p, err := sem.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = sem.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, semaphore.ErrNoPermits)
	require.NoError(t, sem.Release(p))

	st := c.Stats()
	require.EqualValues(t, 3, st.Acquisitions)
	require.EqualValues(t, 1, st.HandOffs, "the writer was handed the lock")
	require.EqualValues(t, 2, st.Locked, "TryLock and TryAcquire")
	require.EqualValues(t, 3, st.Released)
	require.Zero(t, st.Held+st.Waiting)
	require.EqualValues(t, 3, obs.released.Load())
	require.EqualValues(t, 3, obs.acquired.Load())
}

// assertNoError reports err from a goroutine of the test.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestStatsLeaseLost counts a hold whose fixed lease ran out as a lease loss,
// told to the Observer as such, and not as a release.
func TestStatsLeaseLost(t *testing.T) {
	srv := redistest.New(t)
	obs := &lostObserver{}
	c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(strings.TrimSuffix(redistest.KeyPrefix(t), ":")), rlock.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	lockCtx, err := c.Mutex("lapse").Lock(context.Background(), rlock.WithLease(50*time.Millisecond))
	require.NoError(t, err)
	<-lockCtx.Done()
	require.ErrorIs(t, context.Cause(lockCtx), rlock.ErrLeaseLost)
	s := c.Stats()
	require.EqualValues(t, 1, s.LeaseLost)
	require.Zero(t, s.Released+s.Abandoned+s.Held)
	require.EqualValues(t, 1, obs.lost.Load())
}

type lostObserver struct {
	countingObserver
	lost atomic.Int64
}

func (o *lostObserver) HoldEnded(e *rlock.Event) {
	if e.Lost && !e.Abandoned && e.Kind == "mutex" && e.Name == "lapse" && e.Duration > 0 {
		o.lost.Add(1)
	}
}
