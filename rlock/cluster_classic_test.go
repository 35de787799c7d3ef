package rlock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Classic pub/sub forced on a cluster of 3 masters: a waiter subscribes on
// any node, and PUBLISH from a script counts only the subscribers of the node
// running it, so the count must not be taken to mean that a grantee is gone
// (its grant would then go to the next waiter too: two holders). Clients on
// one Mutex, one RWMutex (writers) and one single-permit semaphore never overlap, and every wait
// ends well within the lease (the messages arrive over the cluster bus).
func TestClusterClassicPubSubExclusion(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	classic := rlock.WithPubSub(pubsub.WithSharding(pubsub.ShardingClassic))
	const clients = 6
	var cls []*rlock.Client
	for range clients {
		cls = append(cls, clusterClient(t, c, prefix, classic, rlock.WithWatchdogTimeout(20*time.Second)))
	}
	sems := make([]*semaphore.Semaphore, clients)
	for i, cl := range cls {
		sems[i] = semaphore.New(cl, "classic-sem", semaphore.WithLimit(1))
	}

	var overlaps, acquisitions atomic.Int64
	var mutexInside, semInside, rwInside atomic.Int64 // one counter per resource
	var maxWait atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	critical := func(inside *atomic.Int64, acquire func() error, release func() error) bool {
		start := time.Now()
		if err := acquire(); err != nil {
			t.Error(err)
			return false
		}
		if w := int64(time.Since(start)); w > maxWait.Load() {
			maxWait.Store(w)
		}
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		time.Sleep(time.Millisecond) // the critical section
		inside.Add(-1)
		acquisitions.Add(1)
		if err := release(); err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := cl.Mutex("classic-mutex")
			for time.Now().Before(deadline) {
				var l context.Context
				if !critical(&mutexInside, func() (err error) { l, err = m.Lock(ctx); return err }, func() error { return m.Unlock(l) }) {
					return
				}
			}
			rw := cl.RWMutex("classic-rw")
			for time.Now().Before(deadline.Add(time.Second)) {
				var l context.Context
				if !critical(&rwInside, func() (err error) { l, err = rw.Lock(ctx); return err }, func() error { return rw.Unlock(l) }) {
					return
				}
			}
			for time.Now().Before(deadline.Add(2 * time.Second)) {
				var p context.Context
				if !critical(&semInside, func() (err error) { p, err = sems[i].Acquire(ctx, 1); return err }, func() error { return sems[i].Release(p) }) {
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquisitions, longest wait %v", acquisitions.Load(), time.Duration(maxWait.Load()))
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d acquisitions found another holder inside", n)
	}
	if w := time.Duration(maxWait.Load()); w > 5*time.Second {
		t.Fatalf("a wait took %v; the messages did not arrive", w)
	}
}
