package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/redistest"
)

// TestOnEnd: a hook runs once, in the goroutine that ends the hold, after the
// hold's context is cancelled; hooks added before the end run in order, and
// one added after it runs at once.
func TestOnEnd(t *testing.T) {
	srv := redistest.New(t)
	c, err := core.NewClient(redistest.Client(t, srv), core.Config{
		WatchdogTimeout: 30 * time.Second, UnlockTimeout: 5 * time.Second, NoExpiryPoll: time.Second, KeyPrefix: redistest.KeyPrefix(t),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	h := c.NewHold(core.HoldSpec{Kind: &core.Kind{Name: "test"}, Name: "test", Key: "k", Owner: "o", Token: 1, Lease: time.Minute, Cancel: cancel})
	if !c.Register(h) {
		t.Fatal("Register refused a hold before Close")
	}
	var ran []string
	h.OnEnd(func() {
		if ctx.Err() == nil {
			t.Error("first hook ran before the hold's context was cancelled")
		}
		ran = append(ran, "first")
	})
	h.OnEnd(func() { ran = append(ran, "second") })
	if len(ran) != 0 {
		t.Fatalf("hooks ran before the hold ended: %v", ran)
	}
	cause := errors.New("ended by the test")
	h.End(cause)
	if got := context.Cause(ctx); !errors.Is(got, cause) {
		t.Errorf("context cause = %v, want %v", got, cause)
	}
	h.End(errors.New("a second End"))
	if len(ran) != 2 || ran[0] != "first" || ran[1] != "second" {
		t.Fatalf("hooks ran %v, want [first second], once each", ran)
	}
	h.OnEnd(func() { ran = append(ran, "late") })
	if len(ran) != 3 || ran[2] != "late" {
		t.Fatalf("a hook added after the end ran %v, want it at once", ran)
	}
}
