package mux_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/internal/redistest"
)

// The lock protocol's parts of the Multiplexer, which package pubsub does
// not export (its tests cover the rest): addressed messages, their data, and
// live-only joins. The helpers are those of pubsub's tests, for this
// package's types.

// mxPatience bounds every wait for something that should happen promptly;
// it is generous so that a slow CI machine under -race does not fail tests.
const mxPatience = 10 * time.Second

func mxContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mxNew(t *testing.T, rc rueidis.Client, opts ...func(*mux.Config) error) *mux.Multiplexer {
	t.Helper()
	m, err := mux.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func mxSubscribe(ctx context.Context, t *testing.T, m *mux.Multiplexer, ch string) *mux.Waiter {
	t.Helper()
	w, err := m.Subscribe(ctx, ch)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", ch, err)
	}
	return w
}

func mxPublish(ctx context.Context, t *testing.T, rc rueidis.Client, ch, payload string) int64 {
	t.Helper()
	n, err := rc.Do(ctx, rc.B().Publish().Channel(ch).Message(payload).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PUBLISH %s %s: %v", ch, payload, err)
	}
	return n
}

// mxFired reports, without blocking, whether w has a wake pending (and
// consumes it).
func mxFired(w *mux.Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func mxWaitFired(t *testing.T, w *mux.Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(mxPatience):
		t.Fatalf("%s: not woken within %v", what, mxPatience)
	}
}

// mxFence lets a test wait until every message published before it has been
// dispatched: all channels of a one-connection Multiplexer share a connection,
// whose messages arrive and are dispatched in publication order.
type mxFence struct {
	rc rueidis.Client
	w  *mux.Waiter
	ch string
}

func mxNewFence(ctx context.Context, t *testing.T, m *mux.Multiplexer, rc rueidis.Client, prefix string) *mxFence {
	t.Helper()
	ch := prefix + "fence"
	return &mxFence{rc: rc, w: mxSubscribe(ctx, t, m, ch), ch: ch}
}

func (f *mxFence) sync(ctx context.Context, t *testing.T) {
	t.Helper()
	if n := mxPublish(ctx, t, f.rc, f.ch, "1"); n != 1 {
		t.Fatalf("fence PUBLISH reached %d subscribers, want 1", n)
	}
	mxWaitFired(t, f.w, "fence waiter")
}

// mxExpectFired checks, after a fence, exactly which waiters have a wake
// pending, consuming them.
func mxExpectFired(t *testing.T, ws []*mux.Waiter, want ...int) {
	t.Helper()
	var got []int
	for i, w := range ws {
		if mxFired(w) {
			got = append(got, i)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("woken waiters = %v, want %v", got, want)
	}
}

// mxKillSubscribers closes every connection that has subscriptions, found
// with CLIENT LIST (flag P). Unlike CLIENT KILL TYPE pubsub it also finds
// RESP3 connections, which Redis classifies as "normal".
func mxKillSubscribers(ctx context.Context, t *testing.T, srv *redistest.Server) int {
	t.Helper()
	msg, err := srv.Do(ctx, "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	list, err := msg.ToString()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	// RESP3 sends CLIENT LIST as a verbatim string, prefixed with its format.
	for line := range strings.Lines(strings.TrimPrefix(list, "txt:")) {
		var id, flags string
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "id":
				id = v
			case "flags":
				flags = v
			}
		}
		if id == "" || !strings.Contains(flags, "P") {
			continue
		}
		if _, err := srv.Do(ctx, "CLIENT", "KILL", "ID", id); err != nil {
			t.Fatalf("CLIENT KILL ID %s: %v", id, err)
		}
		killed++
	}
	return killed
}

// A message "@" + tag wakes only the Waiter tagged so, wherever it stands in
// the queue; other payloads ignore tags.
func TestAddressedWake(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv))
	fence := mxNewFence(ctx, t, m, pub, prefix)
	ch, other := prefix+"addressed", prefix+"other"

	ws := make([]*mux.Waiter, 3)
	for i := range ws {
		ws[i] = mxSubscribe(ctx, t, m, ch)
		defer ws[i].Leave(true)
	}
	ow := mxSubscribe(ctx, t, m, other)
	defer ow.Leave(true)
	ws[1].SetTag("b")
	ws[2].SetTag("c")
	ow.SetTag("c")

	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"c")
	fence.sync(ctx, t)
	mxExpectFired(t, ws, 2)
	if mxFired(ow) {
		t.Fatal("a message on one channel woke a waiter of another channel with the same tag")
	}

	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"nobody")
	fence.sync(ctx, t)
	mxExpectFired(t, ws)

	mxPublish(ctx, t, pub, ch, "1")
	fence.sync(ctx, t)
	mxExpectFired(t, ws, 0)

	ws[1].SetTag("")
	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"b")
	fence.sync(ctx, t)
	mxExpectFired(t, ws)

	// An empty tag addresses no one: untagged Waiters (every Waiter a user
	// of package pubsub creates) are never addressed.
	mxPublish(ctx, t, pub, ch, mux.AddressPrefix)
	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+mux.AddressDataSeparator+"data")
	fence.sync(ctx, t)
	mxExpectFired(t, ws)
}

// An addressed message may carry data after the separator: the tagged Waiter
// gets it (once) with TakeData, and a new tag discards data of the old one.
func TestAddressedData(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv))
	fence := mxNewFence(ctx, t, m, pub, prefix)
	ch := prefix + "data"

	ws := []*mux.Waiter{mxSubscribe(ctx, t, m, ch), mxSubscribe(ctx, t, m, ch)}
	defer ws[0].Leave(true)
	defer ws[1].Leave(true)
	ws[0].SetTag("a:1")
	ws[1].SetTag("b:2")

	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"b:2"+mux.AddressDataSeparator+"42")
	fence.sync(ctx, t)
	mxExpectFired(t, ws, 1)
	if d := ws[1].TakeData(); d != "42" {
		t.Fatalf("TakeData = %q, want 42", d)
	}
	if d := ws[1].TakeData(); d != "" {
		t.Fatalf("second TakeData = %q, want nothing", d)
	}
	if d := ws[0].TakeData(); d != "" {
		t.Fatalf("untargeted waiter's TakeData = %q, want nothing", d)
	}

	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"a:1"+mux.AddressDataSeparator+"7")
	fence.sync(ctx, t)
	mxExpectFired(t, ws, 0)
	ws[0].SetTag("a:1") // same tag: the data stays
	ws[0].SetTag("a:3") // new tag: the data of the old one goes
	if d := ws[0].TakeData(); d != "" {
		t.Fatalf("TakeData after a new tag = %q, want nothing", d)
	}
	addressedFollowed(t, ws[1], func(data string) {
		mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"b:2"+mux.AddressDataSeparator+data)
		fence.sync(ctx, t)
	})
}

// addressedFollowed checks Followed on w, tagged so that send reaches it: it
// tells whether anything reached w after the data TakeData last returned, a
// message its keep rule turned away while that data was held (a grant keeps
// its place against a later message), or one since.
func addressedFollowed(t *testing.T, w *mux.Waiter, send func(data string)) {
	t.Helper()
	w.SetTagKeeping("b:2", func(held, _ string) bool { return held == "grant" })
	send("notice")
	send("grant") // displaces the notice, which came before it
	if d := w.TakeData(); d != "grant" || w.Followed() {
		t.Fatalf("TakeData = %q, Followed = %v; want grant, false", d, w.Followed())
	}
	send("grant")
	send("revoked") // turned away: the grant stays
	if d := w.TakeData(); d != "grant" || !w.Followed() {
		t.Fatalf("TakeData = %q, Followed = %v; want grant, true", d, w.Followed())
	}
	send("later")
	if d := w.TakeData(); d != "later" || w.Followed() {
		t.Fatalf("TakeData = %q, Followed = %v; want later, false", d, w.Followed())
	}
	send("since") // after TakeData: held now
	if !w.Followed() {
		t.Fatal("Followed = false with a message held since TakeData")
	}
}

// SubscribeIfLive joins only a channel whose subscription is confirmed on the
// current connection, and never waits or sends a command.
func TestSubscribeIfLive(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.Owned(t)
	rc := redistest.Client(t, srv)
	pub := redistest.Client(t, srv)
	ch := redistest.KeyPrefix(t) + "live"
	m := mxNew(t, rc, func(c *mux.Config) error { c.Linger = time.Minute; return nil })

	if w := m.SubscribeIfLive(ch, 1); w != nil {
		t.Fatal("SubscribeIfLive on a channel nobody subscribed returned a Waiter")
	}
	if n, err := srv.NumSub(ctx, ch); err != nil || n[ch] != 0 {
		t.Fatalf("NUMSUB after SubscribeIfLive on an unsubscribed channel = %v, %v; want 0", n, err)
	}
	first := mxSubscribe(ctx, t, m, ch)
	w := m.SubscribeIfLive(ch, 1)
	if w == nil {
		t.Fatal("SubscribeIfLive on a subscribed channel returned nil")
	}
	w.SetTag("x")
	mxPublish(ctx, t, pub, ch, mux.AddressPrefix+"x")
	mxWaitFired(t, w, "the Waiter joined by SubscribeIfLive")
	first.Leave(true)
	w.Leave(true)
	// Lingering: still confirmed, so still live.
	w = m.SubscribeIfLive(ch, 1)
	if w == nil {
		t.Fatal("SubscribeIfLive on a lingering channel returned nil")
	}
	w.Leave(true)

	// A lost connection drops idle channels: not live until subscribed again.
	if killed := mxKillSubscribers(ctx, t, srv); killed != 1 {
		t.Fatalf("killed %d subscriber connections, want 1", killed)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(mxPatience)
	for m.Stats().Reconnects == 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no reconnect after the kill")
		}
	}
	if w := m.SubscribeIfLive(ch, 1); w != nil {
		t.Fatal("SubscribeIfLive after the connection was lost returned a Waiter")
	}
	m.Close()
	if w := m.SubscribeIfLive(ch, 1); w != nil {
		t.Fatal("SubscribeIfLive after Close returned a Waiter")
	}
}
