package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyNoLeaks(m) }

// TestCloseCutsBackgroundWorkShort: a clean-up started with GoCtx that keeps
// retrying against a stopped Redis for the whole unlock timeout is cancelled
// by Close after CloseGrace; Close returns promptly and the clean-up has
// returned by then.
func TestCloseCutsBackgroundWorkShort(t *testing.T) {
	srv := redistest.Owned(t)
	rc := redistest.Client(t, srv)
	c, err := core.NewClient(rc, core.Config{
		WatchdogTimeout: 30 * time.Second, UnlockTimeout: 30 * time.Second, NoExpiryPoll: time.Second, KeyPrefix: "t",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	var once atomic.Bool
	var returned atomic.Bool
	if !c.GoCtx(func(bg context.Context) {
		defer returned.Store(true)
		ctx, cancel := context.WithTimeout(bg, c.Cfg.UnlockTimeout)
		defer cancel()
		_ = core.RetryTransient(ctx, func() error {
			err := rc.Do(ctx, rc.B().Ping().Build()).Error()
			if err != nil && once.CompareAndSwap(false, true) {
				close(failed)
			}
			return err
		})
	}) {
		t.Fatal("GoCtx refused work before Close")
	}
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the clean-up never reached the stopped Redis")
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > core.CloseGrace+time.Second {
		t.Errorf("Close took %v with a clean-up retrying against a stopped Redis; want about CloseGrace (%v)", d, core.CloseGrace)
	}
	if !returned.Load() {
		t.Error("Close returned before the background work did")
	}
	if err := c.BackgroundContext().Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("BackgroundContext after Close: err = %v, want context.Canceled", err)
	}
	if c.GoCtx(func(context.Context) {}) {
		t.Error("GoCtx accepted work after Close")
	}
}

// TestCloseWaitsForQuickBackgroundWork: work that finishes within the grace
// is not cancelled, and Close does not wait out the grace for nothing.
func TestCloseWaitsForQuickBackgroundWork(t *testing.T) {
	srv := redistest.Owned(t)
	rc := redistest.Client(t, srv)
	c, err := core.NewClient(rc, core.Config{
		WatchdogTimeout: 30 * time.Second, UnlockTimeout: 5 * time.Second, NoExpiryPoll: time.Second, KeyPrefix: "t",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var cancelled atomic.Bool
	c.GoCtx(func(bg context.Context) {
		<-release
		cancelled.Store(bg.Err() != nil)
	})
	go func() {
		time.Sleep(50 * time.Millisecond) // simulated work of the clean-up
		close(release)
	}()
	start := time.Now()
	c.Close()
	if cancelled.Load() {
		t.Error("a clean-up that finished within the grace saw BackgroundContext cancelled")
	}
	if d := time.Since(start); d >= core.CloseGrace {
		t.Errorf("Close took %v: it waited out the grace with no work left", d)
	}
}
