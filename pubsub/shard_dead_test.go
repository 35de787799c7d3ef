package pubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// TestShardedDeadNodeCostsOnlyItsSlots: with one master dead (before the
// cluster notices: a long node timeout), channels of the live masters'
// slots are still subscribed at once, although the dead master has the
// lowest address (the first a slot of unknown owner is tried on), and the
// channel of the dead master's slot is retried with backoff, not redialled
// in a tight loop.
func TestShardedDeadNodeCostsOnlyItsSlots(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc)
	chans := shardChannels(ctx, t, c, redistest.KeyPrefix(t))
	dead := c.Masters[0]
	for _, s := range c.Masters {
		if s.Addr() < dead.Addr() {
			dead = s
		}
	}
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}

	// A waiter of the dead master's slot first: it cannot be confirmed.
	deadCtx, cancelDead := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() {
		w, err := m.Subscribe(deadCtx, chans[dead])
		if err == nil {
			w.Leave(true)
		}
		deadDone <- err
	}()
	before := m.Stats().Reconnects
	window := time.After(2 * time.Second)

	for owner, ch := range chans {
		if owner == dead {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		w, err := m.Subscribe(sctx, ch)
		cancel()
		if err != nil {
			t.Fatalf("Subscribe(%s) on the live master %s with %s dead: %v after %v", ch, owner, dead, err, time.Since(start))
		}
		reply, err := owner.Do(ctx, "SPUBLISH", ch, "1")
		if n, _ := reply.AsInt64(); err != nil || n != 1 {
			t.Errorf("SPUBLISH %s on %s: %d receivers, %v; want 1", ch, owner, n, err)
		}
		mxWaitFired(t, w, ch)
		t.Logf("%s on the live master %s subscribed in %v", ch, owner, time.Since(start))
		w.Leave(true)
	}

	<-window // a window of time for the reconnect rate, not a synchronisation
	// 2s of doubling backoff from 10ms (capped at 1s) is under ten tries.
	n := m.Stats().Reconnects - before
	if n > 40 {
		t.Errorf("%d reconnects to the dead master in 2s: no backoff", n)
	}
	t.Logf("%d reconnects to the dead master in 2s", n)
	select {
	case err := <-deadDone:
		t.Fatalf("Subscribe on the dead master's slot returned %v", err)
	default:
	}
	cancelDead()
	if err := <-deadDone; err == nil {
		t.Fatal("Subscribe on the dead master's slot succeeded")
	}
}

// TestShardedHungNodeCostsOnlyItsSlots: with one master hung (SIGSTOP,
// before the cluster notices: a long node timeout), a subscription pending
// on it does not hold up the others: channels of the healthy masters' slots,
// subscribed after the hung one, are confirmed without waiting for it. Once the master
// resumes, its channel is subscribed too.
func TestShardedHungNodeCostsOnlyItsSlots(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc)
	if _, err := m.Sharded(ctx); err != nil {
		t.Fatal(err)
	}
	chans := shardChannels(ctx, t, c, redistest.KeyPrefix(t))
	hung := c.Masters[0]
	if err := hung.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hung.Resume() })

	hungDone := make(chan error, 1)
	hungW := make(chan *pubsub.Waiter, 1)
	go func() {
		w, err := m.Subscribe(ctx, chans[hung])
		hungW <- w
		hungDone <- err
	}()
	mxEventually(t, mxPatience, func() (bool, string) {
		n := m.Stats().Channels
		return n == 1, fmt.Sprintf("%d channels", n)
	})

	for owner, ch := range chans {
		if owner == hung {
			continue
		}
		// Before the fix they were never subscribed; 2s was exceeded on a
		// 2-core machine running three test suites at once.
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		w, err := m.Subscribe(sctx, ch)
		cancel()
		if err != nil {
			t.Fatalf("Subscribe(%s) on the healthy master %s with %s hung: %v after %v", ch, owner, hung, err, time.Since(start))
		}
		reply, err := owner.Do(ctx, "SPUBLISH", ch, "1")
		if n, _ := reply.AsInt64(); err != nil || n != 1 {
			t.Errorf("SPUBLISH %s on %s: %d receivers, %v; want 1", ch, owner, n, err)
		}
		mxWaitFired(t, w, ch)
		w.Leave(true)
	}
	select {
	case err := <-hungDone:
		t.Fatalf("Subscribe on the hung master's slot returned %v", err)
	default:
	}

	if err := hung.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-hungDone; err != nil {
		t.Fatalf("Subscribe on the resumed master's slot: %v", err)
	}
	w := <-hungW
	defer w.Leave(true)
	reply, err := hung.Do(ctx, "SPUBLISH", chans[hung], "1")
	if n, _ := reply.AsInt64(); err != nil || n != 1 {
		t.Errorf("SPUBLISH %s on the resumed %s: %d receivers, %v; want 1", chans[hung], hung, n, err)
	}
	mxWaitFired(t, w, "resumed")
}
