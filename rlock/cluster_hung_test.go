package rlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestClusterHungMasterCostsOnlyItsHolds: one master of three stops
// answering (SIGSTOP, well within the cluster's node timeout, so the cluster
// stays up). The holds of one Client on the two healthy masters must keep
// being renewed, and a lock handed to the Client on a healthy master while
// the node hangs must have its claim extended: the renewals and extensions
// of one node never wait for another's replies.
func TestClusterHungMasterCostsOnlyItsHolds(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
	const lease = 1500 * time.Millisecond
	opts := []rlock.Option{rlock.WithWatchdogTimeout(lease), rlock.WithClaimWindow(time.Second)}
	x, y := clusterClient(t, cl, prefix, opts...), clusterClient(t, cl, prefix, opts...)
	hung := cl.Masters[0]

	type hold struct {
		name string
		ctx  context.Context
	}
	var healthy []hold
	for i, m := range cl.Masters {
		for _, name := range namesOn(ctx, t, cl, m, "h"+string(rune('a'+i)), 2) {
			l, err := x.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = x.Mutex(name).Unlock(l) }()
			if m != hung {
				healthy = append(healthy, hold{name, l})
			}
		}
	}
	// x waits for a lock on a healthy master that y holds.
	claimed := namesOn(ctx, t, cl, cl.Masters[1], "claim", 1)[0]
	yl, err := y.Mutex(claimed).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		l, err := x.Mutex(claimed).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 5*time.Second, "x never queued for the lock", func() bool {
		msg, err := cl.Masters[1].Do(ctx, "ZCARD", prefix+":{"+claimed+"}:queue")
		n, _ := msg.AsInt64()
		return err == nil && n >= 1
	})

	if err := hung.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hung.Resume() }()
	if err := y.Mutex(claimed).Unlock(yl); err != nil {
		t.Fatal(err)
	}
	var xl context.Context
	select {
	case xl = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("x was not handed the lock within 5s of Unlock")
	}
	if xl == nil {
		t.FailNow()
	}
	defer func() { _ = x.Mutex(claimed).Unlock(xl) }()
	healthy = append(healthy, hold{claimed, xl})

	// Three leases with the node hung: a measurement window.
	window := time.After(3 * lease)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-window:
			return
		case <-tick.C:
			for _, h := range healthy {
				if err := context.Cause(h.ctx); err != nil {
					t.Fatalf("the hold of %q on a healthy master ended while another master hung: %v", h.name, err)
				}
			}
		}
	}
}
