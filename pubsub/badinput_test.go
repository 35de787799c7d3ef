package pubsub_test

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// noPanic runs f, failing the test (instead of crashing the binary) when it
// panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	f()
}

// wantErr fails the test unless err matches sentinel and its message
// contains every one of words.
func wantErr(t *testing.T, what string, err, sentinel error, words ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: err = %v, want one matching %v", what, err, sentinel)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: err = %q, want it to say %q", what, err, w)
		}
	}
}

// TestSubscribeNilContext: Subscribe and SubscribeWeighted refuse a nil
// context with ErrInvalidOption before queuing anything (they used to queue
// the Waiter, then panic, leaving it and its channel counted forever), and the
// Multiplexer works on afterwards. Sharded refuses it too; PublishCommand
// detects nothing with it.
func TestSubscribeNilContext(t *testing.T) {
	ctx := mxContext(t)
	m := mxNew(t, redistest.Client(t, redistest.New(t)))
	ch := redistest.KeyPrefix(t) + "nil-ctx"
	var nilCtx context.Context

	for _, tc := range []struct {
		what string
		sub  func() (*pubsub.Waiter, error)
	}{
		{"Subscribe(nil ctx)", func() (*pubsub.Waiter, error) { return m.Subscribe(nilCtx, ch) }},
		{"SubscribeWeighted(nil ctx)", func() (*pubsub.Waiter, error) { return m.SubscribeWeighted(nilCtx, ch, 3) }},
		{"Subscribe(nil ctx, \"\")", func() (*pubsub.Waiter, error) { return m.Subscribe(nilCtx, "") }},
	} {
		noPanic(t, tc.what, func() {
			w, err := tc.sub()
			if w != nil {
				t.Errorf("%s returned a Waiter with err %v", tc.what, err)
				w.Leave(true)
			}
			wantErr(t, tc.what, err, pubsub.ErrInvalidOption, "nil context")
		})
		if s := m.Stats(); s.Channels != 0 || s.Waiters != 0 {
			t.Errorf("after %s: Stats = %+v, want no channel and no Waiter", tc.what, s)
		}
		if n := m.Waiting(ch); n != 0 {
			t.Errorf("after %s: Waiting = %d, want 0", tc.what, n)
		}
	}
	noPanic(t, "Sharded(nil ctx)", func() {
		sharded, err := m.Sharded(nilCtx)
		if sharded {
			t.Errorf("Sharded(nil ctx) = true with err %v", err)
		}
		wantErr(t, "Sharded(nil ctx)", err, pubsub.ErrInvalidOption, "nil context")
	})
	noPanic(t, "PublishCommand(nil ctx)", func() {
		if cmd := m.PublishCommand(nilCtx); cmd != "PUBLISH" {
			t.Errorf("PublishCommand(nil ctx) on a standalone client = %q, want PUBLISH", cmd)
		}
	})

	w := mxSubscribe(ctx, t, m, ch)
	if n := m.Waiting(ch); n != 1 {
		t.Errorf("Waiting after a good Subscribe = %d, want 1", n)
	}
	w.Leave(true)
	if s := m.Stats(); s.Waiters != 0 {
		t.Errorf("Stats after Leave = %+v, want no Waiter", s)
	}
}

// TestWaitNilContext: Wait refuses a nil context with ErrInvalidOption instead
// of panicking, and the pending wake is not consumed.
func TestWaitNilContext(t *testing.T) {
	ctx := mxContext(t)
	m := mxNew(t, redistest.Client(t, redistest.New(t)))
	w := mxSubscribe(ctx, t, m, redistest.KeyPrefix(t)+"wait-nil")
	defer w.Leave(true)
	w.Notify()
	noPanic(t, "Wait(nil ctx)", func() {
		wantErr(t, "Wait(nil ctx)", w.Wait(nil), pubsub.ErrInvalidOption, "nil context") //nolint:staticcheck // the nil context is the point
	})
	if !mxFired(w) {
		t.Error("Wait(nil ctx) consumed the pending wake")
	}
}

// TestNewBadInput: New refuses a nil client and an option out of range with
// errors matching ErrInvalidOption; nil options are skipped.
func TestNewBadInput(t *testing.T) {
	noPanic(t, "New(nil)", func() {
		m, err := pubsub.New(nil)
		if m != nil {
			t.Error("New(nil) returned a Multiplexer")
		}
		wantErr(t, "New(nil)", err, pubsub.ErrInvalidOption, "nil rueidis client")
	})
	rc := redistest.Client(t, redistest.New(t))
	_, err := pubsub.New(rc, pubsub.WithConnections(0))
	wantErr(t, "New(WithConnections(0))", err, pubsub.ErrInvalidOption, "connections", "between")
	_, err = pubsub.New(rc, pubsub.WithSharding(pubsub.Sharding(42)))
	wantErr(t, "New(WithSharding(42))", err, pubsub.ErrInvalidOption, "sharding mode 42")
	_, err = pubsub.New(rc, pubsub.WithSharding(pubsub.ShardingSharded))
	wantErr(t, "New(WithSharding(ShardingSharded)) on a standalone client", err, pubsub.ErrInvalidOption, "Cluster")
	noPanic(t, "New(nil option)", func() {
		m, err := pubsub.New(rc, nil)
		if err != nil {
			t.Errorf("New(rc, nil): %v", err)
		}
		if m != nil {
			m.Close()
		}
	})
}

// TestZeroMultiplexer: a Multiplexer not made by New (zero or nil) behaves as
// a closed one, and says so, instead of panicking.
func TestZeroMultiplexer(t *testing.T) {
	ctx := context.Background()
	var nilMux *pubsub.Multiplexer
	for what, m := range map[string]*pubsub.Multiplexer{"Multiplexer{}": {}, "nil *Multiplexer": nilMux} {
		noPanic(t, what, func() {
			w, err := m.Subscribe(ctx, "x")
			if w != nil {
				t.Errorf("%s.Subscribe returned a Waiter", what)
			}
			wantErr(t, what+".Subscribe", err, pubsub.ErrClosed, "not made by New")
			_, err = m.SubscribeWeighted(ctx, "x", 2)
			wantErr(t, what+".SubscribeWeighted", err, pubsub.ErrClosed, "not made by New")
			_, err = m.Subscribe(nil, "x") //nolint:staticcheck // the nil context is the point
			wantErr(t, what+".Subscribe(nil ctx)", err, pubsub.ErrInvalidOption, "nil context")
			_, err = m.Sharded(ctx)
			wantErr(t, what+".Sharded", err, pubsub.ErrClosed, "not made by New")
			if cmd := m.PublishCommand(ctx); cmd != "PUBLISH" {
				t.Errorf("%s.PublishCommand = %q, want PUBLISH", what, cmd)
			}
			if s := m.Stats(); s != (pubsub.Stats{}) {
				t.Errorf("%s.Stats = %+v, want zero", what, s)
			}
			if n := m.Waiting("x"); n != 0 {
				t.Errorf("%s.Waiting = %d, want 0", what, n)
			}
			m.Close()
			m.Close()
		})
	}
}

// TestZeroWaiter: a Waiter not made by Subscribe (zero or nil) is in no queue
// and behaves as one whose Multiplexer closed, instead of panicking.
func TestZeroWaiter(t *testing.T) {
	ctx := context.Background()
	var nilWaiter *pubsub.Waiter
	for what, w := range map[string]*pubsub.Waiter{"Waiter{}": {}, "nil *Waiter": nilWaiter} {
		noPanic(t, what, func() {
			select {
			case <-w.Done():
			default:
				t.Errorf("%s.Done is not closed", what)
			}
			select {
			case <-w.C():
				t.Errorf("%s.C received", what)
			default:
			}
			wantErr(t, what+".Err", w.Err(), pubsub.ErrClosed, "not made by Subscribe")
			wantErr(t, what+".Wait", w.Wait(ctx), pubsub.ErrClosed, "not made by Subscribe")
			wantErr(t, what+".Wait(nil ctx)", w.Wait(nil), pubsub.ErrInvalidOption, "nil context") //nolint:staticcheck // the nil context is the point
			if w.Live() {
				t.Errorf("%s.Live = true", what)
			}
			w.Notify()
			w.Leave(false)
			w.Leave(true)
		})
	}
}
