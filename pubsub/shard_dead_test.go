package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
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
