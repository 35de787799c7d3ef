package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// TestBoundedInlineWhileAnswered: commands whose context never ends, and a
// caller's releases (Inline), run inline while the Client's commands get
// answers; other cancellable contexts never do. After a command that got no
// answer (Redis paused past its deadline) nothing runs inline, so that no
// command waits on a dial past its context, until a command is answered.
func TestBoundedInlineWhileAnswered(t *testing.T) {
	srv := redistest.Owned(t)
	b := newBounded(redistest.Client(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(when string, bg, release, other bool) {
		t.Helper()
		if got := b.inline(context.Background()); got != bg {
			t.Errorf("%s: inline(Background) = %v, want %v", when, got, bg)
		}
		if got := b.inline(Inline(ctx)); got != release {
			t.Errorf("%s: inline(a caller's release) = %v, want %v", when, got, release)
		}
		if got := b.inline(ctx); got != other {
			t.Errorf("%s: inline(a cancellable context) = %v, want %v", when, got, other)
		}
	}
	if err := b.Do(ctx, b.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	check("answered", true, true, false)

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(Inline(ctx), 50*time.Millisecond)
	start := time.Now()
	err := b.Do(short, b.B().Ping().Build()).Error()
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PING with Redis paused: %v, want the deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("PING with Redis paused returned %v after it started, deadline 50ms", d)
	}
	check("not answered", false, false, false)

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(ctx, b.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	check("answered again", true, true, false)
}
