package rlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// pausedBounds: how late past its deadline a Lock may return, and how long
// past its grace (500ms) Close may take, with every Redis node paused.
const (
	pausedLockSlack  = 300 * time.Millisecond
	pausedCloseBound = 500*time.Millisecond + time.Second
)

// TestPausedRedisLockAndCloseArePrompt: with every node SIGSTOPped (a
// standalone server; every master of a cluster, whose node timeout keeps it
// from failing over), Lock returns by its context's deadline and Close within
// its grace, although rueidis's dials ignore cancellation and every command
// for a node waits for the dial in progress (its handshake runs to its 5s
// dial timeout). Before, Close waited for background releases and clean-ups
// stuck in such dials (5-10s), and a Lock that came while one was in progress
// returned seconds after its deadline.
func TestPausedRedisLockAndCloseArePrompt(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Owned(t)
		prefix := redistest.KeyPrefix(t)
		mk := func() *rlock.Client {
			c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		checkPausedPrompt(t, []*redistest.Server{srv}, [][]string{{"a", "b", "c"}}, mk)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		prefix := strings.TrimSuffix(redistest.KeyPrefix(t), ":")
		var names [][]string
		for i, m := range cl.Masters {
			names = append(names, namesOn(ctx, t, cl, m, "p"+string(rune('a'+i)), 3))
		}
		mk := func() *rlock.Client { return clusterClient(t, cl, prefix) }
		checkPausedPrompt(t, cl.Masters, names, mk)
	})
}

// checkPausedPrompt: names[i] are three lock names on servers[i].
func checkPausedPrompt(t *testing.T, servers []*redistest.Server, names [][]string, mk func() *rlock.Client) {
	x, y := mk(), mk()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range names {
		l, err := x.Mutex(n[0]).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = x.Mutex(n[0]).Unlock(l) }()
	}
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Resume() }()
	}
	lockBy := func(name string, d time.Duration) {
		t.Helper()
		lctx, lcancel := context.WithTimeout(ctx, d)
		defer lcancel()
		start := time.Now()
		l, err := y.Mutex(name).Lock(lctx)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("Lock %q succeeded with Redis paused", name)
			_ = y.Mutex(name).Unlock(l)
		}
		if took > d+pausedLockSlack {
			t.Errorf("Lock %q returned %v after its %v deadline (%v)", name, took-d, d, err)
		}
	}
	for _, n := range names {
		lockBy(n[0], 700*time.Millisecond) // held: waits, then gives up its place
		lockBy(n[1], 400*time.Millisecond) // free, but Redis does not answer
		lockBy(n[2], 400*time.Millisecond)
	}
	for _, c := range []*rlock.Client{y, x} {
		start := time.Now()
		_ = c.Close()
		if took := time.Since(start); took > pausedCloseBound {
			t.Errorf("Close took %v with Redis paused, want at most %v", took, pausedCloseBound)
		}
	}
}
