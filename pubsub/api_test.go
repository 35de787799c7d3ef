package pubsub_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// TestPublicAPI pins the exported methods of Multiplexer and Waiter: the
// general-purpose multiplexer, without the lock protocol's parts (tags,
// addressed data, live-only joins, budget-deaf listeners), which only the
// types of internal/mux export.
func TestPublicAPI(t *testing.T) {
	methods := func(v any) []string {
		typ := reflect.TypeOf(v)
		var names []string
		for i := range typ.NumMethod() {
			names = append(names, typ.Method(i).Name)
		}
		return names
	}
	for _, tc := range []struct {
		v    any
		want []string
	}{
		{&pubsub.Multiplexer{}, []string{"Close", "PublishCommand", "Sharded", "Stats", "Subscribe", "SubscribeWeighted", "Waiting"}},
		{&pubsub.Waiter{}, []string{"C", "Done", "Err", "Leave", "Live", "Notify", "Wait"}},
	} {
		if got := methods(tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%T methods = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// TestWakeAll: the documented payload is the one the implementation parses.
func TestWakeAll(t *testing.T) {
	if pubsub.WakeAll != mux.WakeAll {
		t.Fatalf("pubsub.WakeAll = %q, internal/mux.WakeAll = %q", pubsub.WakeAll, mux.WakeAll)
	}
}

// TestWaiterWait: Wait returns nil after a wake (a message or Notify), the
// context's error when it ends, and ErrClosed once the Multiplexer is closed.
func TestWaiterWait(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	m := mxNew(t, redistest.Client(t, srv))
	ch := redistest.KeyPrefix(t) + "wait"
	w := mxSubscribe(ctx, t, m, ch)
	defer w.Leave(true)

	mxPublish(ctx, t, pub, ch, "1")
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("Wait after a message: %v", err)
	}
	w.Notify()
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("Wait after Notify: %v", err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Wait(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v, want context.Canceled", err)
	}
	m.Close()
	if err := w.Wait(ctx); !errors.Is(err, pubsub.ErrClosed) {
		t.Fatalf("Wait after Close = %v, want ErrClosed", err)
	}
}

// TestOptionBounds: New rejects duration options outside their documented
// range with ErrInvalidOption, naming the option and the range, and accepts
// the bounds.
func TestOptionBounds(t *testing.T) {
	rc := redistest.Client(t, redistest.New(t))
	for _, tc := range []struct {
		name string
		opt  pubsub.Option
		ok   bool
	}{
		{"WithLinger", pubsub.WithLinger(-time.Nanosecond), false},
		{"WithLinger", pubsub.WithLinger(time.Minute + time.Nanosecond), false},
		{"WithLinger", pubsub.WithLinger(0), true},
		{"WithLinger", pubsub.WithLinger(time.Minute), true},
		{"WithMaxReconnectBackoff", pubsub.WithMaxReconnectBackoff(0), false},
		{"WithMaxReconnectBackoff", pubsub.WithMaxReconnectBackoff(time.Nanosecond), false},
		{"WithMaxReconnectBackoff", pubsub.WithMaxReconnectBackoff(time.Hour), false},
		{"WithMaxReconnectBackoff", pubsub.WithMaxReconnectBackoff(10 * time.Millisecond), true},
		{"WithMaxReconnectBackoff", pubsub.WithMaxReconnectBackoff(time.Minute), true},
	} {
		m, err := pubsub.New(rc, tc.opt)
		if m != nil {
			m.Close()
		}
		switch {
		case tc.ok && err != nil:
			t.Errorf("New with %s at its bound: %v", tc.name, err)
		case !tc.ok && (!errors.Is(err, pubsub.ErrInvalidOption) || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "between")):
			t.Errorf("New with an out-of-range %s: err = %v, want ErrInvalidOption naming the option and its range", tc.name, err)
		}
	}
}
