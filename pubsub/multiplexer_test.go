package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// mxPatience bounds every wait for something that should happen promptly;
// it is generous so that a slow CI machine under -race does not fail tests.
const mxPatience = 10 * time.Second

func mxContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mxNew(t *testing.T, rc rueidis.Client, opts ...pubsub.Option) *pubsub.Multiplexer {
	t.Helper()
	m, err := pubsub.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func mxSubscribe(ctx context.Context, t *testing.T, m *pubsub.Multiplexer, ch string) *pubsub.Waiter {
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
func mxFired(w *pubsub.Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func mxWaitFired(t *testing.T, w *pubsub.Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(mxPatience):
		t.Fatalf("%s: not woken within %v", what, mxPatience)
	}
}

// mxEventually polls cond until it holds or timeout passes.
func mxEventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func mxNumSub(ctx context.Context, t *testing.T, srv *redistest.Server, chs ...string) map[string]int64 {
	t.Helper()
	n, err := srv.NumSub(ctx, chs...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mxNumSubIs polls PUBSUB NUMSUB until every channel has want subscribers.
func mxNumSubIs(ctx context.Context, t *testing.T, srv *redistest.Server, want int64, chs ...string) {
	t.Helper()
	mxEventually(t, mxPatience, func() (bool, string) {
		got := mxNumSub(ctx, t, srv, chs...)
		for _, ch := range chs {
			if got[ch] != want {
				return false, fmt.Sprintf("NUMSUB %s = %d, want %d", ch, got[ch], want)
			}
		}
		return true, ""
	})
}

func mxStat(ctx context.Context, t *testing.T, srv *redistest.Server, cmd string) int64 {
	t.Helper()
	st, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st[cmd]
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
	for _, id := range mxSubscriberIDs(list) {
		if _, err := srv.Do(ctx, "CLIENT", "KILL", "ID", id); err != nil {
			t.Fatalf("CLIENT KILL ID %s: %v", id, err)
		}
		killed++
	}
	return killed
}

func mxSubscriberIDs(clientList string) []string {
	// RESP3 sends CLIENT LIST as a verbatim string, prefixed with its format.
	clientList = strings.TrimPrefix(clientList, "txt:")
	var ids []string
	for line := range strings.Lines(clientList) {
		var id, flags string
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			// A RESP3 reply is a verbatim string: "txt:" opens its first line.
			switch strings.TrimPrefix(k, "txt:") {
			case "id":
				id = v
			case "flags":
				flags = v
			}
		}
		if id != "" && strings.Contains(flags, "P") {
			ids = append(ids, id)
		}
	}
	return ids
}

// mxFence lets a test wait until every message published before it has been
// dispatched: all channels of a one-connection Multiplexer share a connection,
// whose messages arrive and are dispatched in publication order.
type mxFence struct {
	rc rueidis.Client
	w  *pubsub.Waiter
	ch string
}

func mxNewFence(ctx context.Context, t *testing.T, m *pubsub.Multiplexer, rc rueidis.Client, prefix string) *mxFence {
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
func mxExpectFired(t *testing.T, ws []*pubsub.Waiter, want ...int) {
	t.Helper()
	wantSet := map[int]bool{}
	for _, i := range want {
		wantSet[i] = true
	}
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

// mxStacks returns the stacks of the goroutines that mention substr.
func mxStacks(substr string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for st := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(st, substr) {
			out = append(out, st)
		}
	}
	return strings.Join(out, "\n\n")
}

func mxWaitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(mxPatience)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines still running, baseline %d:\n%s", n, baseline, buf)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// subscribeAll subscribes one waiter per channel, in parallel.
func mxSubscribeAll(ctx context.Context, t *testing.T, m *pubsub.Multiplexer, chs []string) []*pubsub.Waiter {
	t.Helper()
	ws := make([]*pubsub.Waiter, len(chs))
	errs := make(chan error, len(chs))
	var wg sync.WaitGroup
	const workers = 32
	for k := range workers {
		wg.Go(func() {
			for i := k; i < len(chs); i += workers {
				w, err := m.Subscribe(ctx, chs[i])
				if err != nil {
					errs <- fmt.Errorf("Subscribe(%q): %w", chs[i], err)
					return
				}
				ws[i] = w
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ws
}

// 7. Subscribe returns only once Redis confirmed the subscription: a PUBLISH
// sent right after it returns reaches the Multiplexer and wakes the waiter.
func TestSubscribeReturnsAfterConfirmation(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv))

	t.Run("fresh channels", func(t *testing.T) {
		for i := range 50 {
			ch := prefix + "fresh:" + strconv.Itoa(i)
			w := mxSubscribe(ctx, t, m, ch)
			if n := mxPublish(ctx, t, pub, ch, "1"); n < 1 {
				t.Fatalf("channel %d: PUBLISH right after Subscribe reached %d subscribers: Subscribe returned before the subscription was confirmed", i, n)
			}
			mxWaitFired(t, w, "waiter "+strconv.Itoa(i))
			w.Leave(true)
		}
	})

	t.Run("concurrent joiners", func(t *testing.T) {
		// Joiners that find the channel's subscription still in flight must
		// wait for it too.
		for round := range 5 {
			ch := prefix + "joiners:" + strconv.Itoa(round)
			const n = 20
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() {
					w, err := m.Subscribe(ctx, ch)
					if err != nil {
						errs <- err
						return
					}
					defer w.Leave(true)
					r, err := pub.Do(ctx, pub.B().Publish().Channel(ch).Message(pubsub.WakeAll).Build()).AsInt64()
					if err != nil {
						errs <- err
						return
					}
					if r < 1 {
						errs <- fmt.Errorf("joiner %d: PUBLISH right after Subscribe reached %d subscribers", i, r)
						return
					}
					select {
					case <-w.C():
					case <-time.After(mxPatience):
						errs <- fmt.Errorf("joiner %d: not woken by a WakeAll published after its Subscribe returned", i)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
	})
}

// 8. Channels are reference counted: one subscription per channel whatever the
// number of waiters, dropped when the last leaves (after the linger).
func TestReferenceCounting(t *testing.T) {
	ctx := mxContext(t)

	t.Run("no linger", func(t *testing.T) {
		srv := redistest.Owned(t)
		prefix := redistest.KeyPrefix(t)
		m := mxNew(t, redistest.Client(t, srv), pubsub.WithLinger(0))
		ch := prefix + "shared"
		chs := make([]string, 100)
		for i := range chs {
			chs[i] = ch
		}
		ws := mxSubscribeAll(ctx, t, m, chs)
		if got := mxNumSub(ctx, t, srv, ch)[ch]; got != 1 {
			t.Fatalf("100 waiters: NUMSUB = %d, want 1", got)
		}
		if s := m.Stats(); s.Channels != 1 || s.Waiters != 100 {
			t.Fatalf("Stats = %+v, want 1 channel and 100 waiters", s)
		}
		if got := mxStat(ctx, t, srv, "subscribe"); got != 1 {
			t.Fatalf("100 waiters sent %d SUBSCRIBE commands, want 1", got)
		}
		for _, w := range ws[:50] {
			w.Leave(true)
		}
		// A fresh subscription is a barrier: the connection goroutine sends
		// pending UNSUBSCRIBEs before SUBSCRIBEs.
		barrier := mxSubscribe(ctx, t, m, prefix+"barrier1")
		if got := mxNumSub(ctx, t, srv, ch)[ch]; got != 1 {
			t.Fatalf("50 of 100 waiters left: NUMSUB = %d, want 1", got)
		}
		for _, w := range ws[50:] {
			w.Leave(true)
		}
		mxNumSubIs(ctx, t, srv, 0, ch)
		barrier.Leave(true)
		mxNumSubIs(ctx, t, srv, 0, prefix+"barrier1")
		mxEventually(t, mxPatience, func() (bool, string) {
			s := m.Stats()
			return s.Channels == 0 && s.Waiters == 0, fmt.Sprintf("Stats = %+v", s)
		})
	})

	t.Run("linger", func(t *testing.T) {
		srv := redistest.Owned(t)
		prefix := redistest.KeyPrefix(t)
		const linger = 300 * time.Millisecond
		m := mxNew(t, redistest.Client(t, srv), pubsub.WithLinger(linger))
		ch := prefix + "lingering"

		w := mxSubscribe(ctx, t, m, ch)
		left := time.Now()
		w.Leave(true)
		if got := mxNumSub(ctx, t, srv, ch)[ch]; got != 1 {
			t.Fatalf("right after the last waiter left: NUMSUB = %d, want 1 (lingering)", got)
		}
		mxNumSubIs(ctx, t, srv, 0, ch)
		if d := time.Since(left); d < linger-50*time.Millisecond {
			t.Fatalf("unsubscribed %v after the last waiter left, linger is %v", d, linger)
		}

		// Rejoining during the linger reuses the subscription.
		ch = prefix + "rejoined"
		w = mxSubscribe(ctx, t, m, ch)
		subs := mxStat(ctx, t, srv, "subscribe")
		w.Leave(true)
		w = mxSubscribe(ctx, t, m, ch)
		defer w.Leave(true)
		if got := mxStat(ctx, t, srv, "subscribe"); got != subs {
			t.Fatalf("rejoining during the linger sent %d SUBSCRIBE command(s)", got-subs)
		}
		// The cancelled linger must not unsubscribe the channel later.
		until := time.Now().Add(2*linger + 100*time.Millisecond)
		for time.Now().Before(until) {
			if got := mxNumSub(ctx, t, srv, ch)[ch]; got != 1 {
				t.Fatalf("waiter rejoined during the linger: NUMSUB = %d, want 1", got)
			}
			time.Sleep(25 * time.Millisecond) // observation window
		}
		if n := mxPublish(ctx, t, redistest.Client(t, srv), ch, "1"); n != 1 {
			t.Fatalf("PUBLISH to the rejoined channel reached %d subscribers", n)
		}
		mxWaitFired(t, w, "rejoined waiter")
	})
}

// 9. A message's payload is a budget: it wakes that many waiters, oldest first,
// while their weights fit; "*" wakes all.
func TestMessageBudget(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv))
	fence := mxNewFence(ctx, t, m, pub, prefix)

	subscribeN := func(t *testing.T, ch string, n int) []*pubsub.Waiter {
		t.Helper()
		ws := make([]*pubsub.Waiter, n)
		for i := range ws { // one after the other: arrival order is index order
			ws[i] = mxSubscribe(ctx, t, m, ch)
		}
		t.Cleanup(func() {
			for _, w := range ws {
				w.Leave(true)
			}
		})
		return ws
	}

	t.Run("counts", func(t *testing.T) {
		ch := prefix + "counts"
		ws := subscribeN(t, ch, 6)

		mxPublish(ctx, t, pub, ch, "1")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0)

		mxPublish(ctx, t, pub, ch, "3")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0, 1, 2)

		mxPublish(ctx, t, pub, ch, pubsub.WakeAll)
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0, 1, 2, 3, 4, 5)

		// Unparsable or non-positive budgets count as 1.
		mxPublish(ctx, t, pub, ch, "0")
		mxPublish(ctx, t, pub, ch, "junk")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0, 1)
	})

	t.Run("pending wake is not counted twice", func(t *testing.T) {
		// Two releases before the first woken waiter re-checks must wake two
		// waiters, not the same one twice.
		ch := prefix + "pending"
		ws := subscribeN(t, ch, 3)
		mxPublish(ctx, t, pub, ch, "1")
		mxPublish(ctx, t, pub, ch, "1")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0, 1)
	})

	t.Run("weighted strict order", func(t *testing.T) {
		ch := prefix + "weighted"
		var ws []*pubsub.Waiter
		for _, weight := range []int64{3, 3, 1} {
			w, err := m.SubscribeWeighted(ctx, ch, weight)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Leave(true)
			ws = append(ws, w)
		}
		// 5 covers the first 3 but not the second 3; the 1 behind it must not
		// overtake it.
		mxPublish(ctx, t, pub, ch, "5")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0)

		mxPublish(ctx, t, pub, ch, "7")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0, 1, 2)

		// A budget smaller than the first waiter's weight still wakes it.
		mxPublish(ctx, t, pub, ch, "1")
		fence.sync(ctx, t)
		mxExpectFired(t, ws, 0)
	})

	t.Run("FIFO as waiters leave", func(t *testing.T) {
		ch := prefix + "fifo"
		ws := subscribeN(t, ch, 5)
		for i := range ws {
			mxPublish(ctx, t, pub, ch, "1")
			fence.sync(ctx, t)
			want := []int{i}
			mxExpectFired(t, ws, want...)
			ws[i].Leave(true)
		}
	})
}

// 10. A waiter that leaves without using its wake hands it to the next in line.
func TestUnsatisfiedLeavePassesWake(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv))
	fence := mxNewFence(ctx, t, m, pub, prefix)
	ch := prefix + "handoff"

	ws := make([]*pubsub.Waiter, 4)
	for i := range ws {
		ws[i] = mxSubscribe(ctx, t, m, ch)
		defer ws[i].Leave(true)
	}

	mxPublish(ctx, t, pub, ch, "1")
	fence.sync(ctx, t)
	mxExpectFired(t, ws, 0)

	// w0 was woken but gives up: its wake goes to w1, synchronously.
	ws[0].Leave(false)
	mxExpectFired(t, ws, 1)

	// w1 got what it waited for: nothing is passed on.
	ws[1].Leave(true)
	mxExpectFired(t, ws)

	// A waiter leaving unsatisfied while the next one already has a wake
	// pending hands it further down the line.
	mxPublish(ctx, t, pub, ch, "1")
	fence.sync(ctx, t)
	ws[2].Leave(false) // w2 has a pending wake it never consumed
	if !mxFired(ws[3]) {
		t.Fatal("w2 left unsatisfied with a pending wake, but w3 was not woken")
	}

	// Leave is idempotent: a second Leave passes nothing.
	ws[2].Leave(false)
	if mxFired(ws[3]) {
		t.Fatal("a second Leave of the same waiter passed another wake")
	}
}

// 11. After a lost connection the Multiplexer resubscribes every channel, then
// wakes every waiter (messages of the gap are lost).
func TestReconnectResubscribesAndWakesAll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		resp2 bool
	}{{"RESP3", false}, {"RESP2", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := mxContext(t)
			srv := redistest.Owned(t)
			pub := redistest.Client(t, srv)
			prefix := redistest.KeyPrefix(t)
			rc := redistest.Client(t, srv, func(o *rueidis.ClientOption) {
				o.AlwaysRESP2 = tc.resp2
				o.DisableCache = tc.resp2 // client-side caching needs RESP3
			})
			m := mxNew(t, rc)

			chs := make([]string, 1000)
			for i := range chs {
				chs[i] = prefix + strconv.Itoa(i)
			}
			ws := mxSubscribeAll(ctx, t, m, chs)
			defer func() {
				for _, w := range ws {
					w.Leave(true)
				}
			}()
			mxNumSubIs(ctx, t, srv, 1, chs...)
			if s := m.Stats(); s.Reconnects != 0 || s.Channels != len(chs) || s.Waiters != len(chs) {
				t.Fatalf("before the kill: Stats = %+v", s)
			}
			for i, w := range ws {
				if mxFired(w) {
					t.Fatalf("waiter %d woken before anything happened", i)
				}
			}

			var killed int
			if tc.resp2 {
				n, err := srv.KillClients(ctx, "pubsub")
				if err != nil {
					t.Fatal(err)
				}
				killed = int(n)
			} else {
				killed = mxKillSubscribers(ctx, t, srv)
			}
			if killed != 1 {
				t.Fatalf("killed %d subscriber connections, want 1", killed)
			}

			deadline := time.After(mxPatience)
			for i, w := range ws {
				select {
				case <-w.C():
				case <-deadline:
					t.Fatalf("waiter %d (and maybe more) not woken within %v of the connection kill; Stats = %+v, NUMSUB %s = %d",
						i, mxPatience, m.Stats(), chs[0], mxNumSub(ctx, t, srv, chs[0])[chs[0]])
				}
			}
			// Waiters are woken only once everything is subscribed again: no
			// polling here.
			got := mxNumSub(ctx, t, srv, chs...)
			for _, ch := range chs {
				if got[ch] != 1 {
					t.Fatalf("waiters were woken, but NUMSUB %s = %d, want 1", ch, got[ch])
				}
			}
			if s := m.Stats(); s.Reconnects < 1 || s.Channels != len(chs) || s.Waiters != len(chs) {
				t.Fatalf("after the reconnect: Stats = %+v, want Reconnects >= 1 and all channels and waiters kept", s)
			}

			// Messages flow on the new connection.
			cmds := make(rueidis.Commands, len(chs))
			for i, ch := range chs {
				cmds[i] = pub.B().Publish().Channel(ch).Message("1").Build()
			}
			for i, r := range pub.DoMulti(ctx, cmds...) {
				if n, err := r.AsInt64(); err != nil || n != 1 {
					t.Fatalf("PUBLISH %s after the reconnect: %d, %v", chs[i], n, err)
				}
			}
			deadline = time.After(mxPatience)
			for i, w := range ws {
				select {
				case <-w.C():
				case <-deadline:
					t.Fatalf("waiter %d not woken by a message after the reconnect", i)
				}
			}
		})
	}
}

// 12. Close ends every wait and leaves nothing behind.
func TestClose(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	prefix := redistest.KeyPrefix(t)

	baseline := runtime.NumGoroutine()
	rc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	m, err := pubsub.New(rc, pubsub.WithConnections(2))
	if err != nil {
		t.Fatal(err)
	}
	chs := []string{prefix + "a", prefix + "b", prefix + "c"}
	var ws []*pubsub.Waiter
	for _, ch := range chs {
		for range 3 {
			ws = append(ws, mxSubscribe(ctx, t, m, ch))
		}
	}
	mxNumSubIs(ctx, t, srv, 1, chs...)

	m.Close()
	for i, w := range ws {
		select {
		case <-w.Done():
		default:
			t.Fatalf("waiter %d: Done not closed after Close returned", i)
		}
	}
	if _, err := m.Subscribe(ctx, chs[0]); !errors.Is(err, pubsub.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if _, err := m.SubscribeWeighted(ctx, prefix+"new", 2); !errors.Is(err, pubsub.ErrClosed) {
		t.Fatalf("SubscribeWeighted after Close: %v, want ErrClosed", err)
	}
	for _, w := range ws {
		w.Leave(false)
	}
	m.Close() // idempotent
	mxNumSubIs(ctx, t, srv, 0, chs...)
	rc.Close()
	mxWaitGoroutines(t, baseline)
}

// 12b. Close ends a Subscribe that is still waiting for Redis to confirm.
func TestCloseDuringPendingSubscribe(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.Owned(t)
	prefix := redistest.KeyPrefix(t)
	rc := redistest.Client(t, srv)
	m, err := pubsub.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	// Open the connection first, so that the pending part is the SUBSCRIBE.
	mxSubscribe(ctx, t, m, prefix+"warm").Leave(true)

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	done := make(chan error, 1)
	go func() {
		_, err := m.Subscribe(ctx, prefix+"pending")
		done <- err
	}()
	mxEventually(t, mxPatience, func() (bool, string) {
		s := m.Stats()
		return s.Waiters == 1, fmt.Sprintf("Stats = %+v", s)
	})
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, pubsub.ErrClosed) {
			t.Fatalf("pending Subscribe ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(mxPatience):
		t.Fatal("pending Subscribe did not return after Close")
	}
	// Close cancels the commands in flight: it must not wait for an
	// unresponsive Redis (rueidis gives up on a silent connection only after
	// its ConnWriteTimeout, 10s by default).
	const closeBound = 5 * time.Second
	select {
	case <-closed:
	case <-time.After(closeBound):
		stacks := mxStacks("relock/pubsub.")
		_ = srv.Resume()
		<-closed
		t.Fatalf("Close did not return within %v while Redis was unresponsive; Multiplexer goroutines then:\n%s", closeBound, stacks)
	}
}

// 13. Many channels spread over several connections: one message per channel
// wakes exactly one waiter of that channel.
func TestManyChannelsOverConnections(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.New(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, redistest.Client(t, srv), pubsub.WithConnections(4))

	chs := make([]string, 2000)
	for i := range chs {
		chs[i] = prefix + strconv.Itoa(i)
	}
	first := mxSubscribeAll(ctx, t, m, chs)
	second := mxSubscribeAll(ctx, t, m, chs) // each joins after its channel's first
	defer func() {
		for i := range chs {
			first[i].Leave(true)
			second[i].Leave(true)
		}
	}()
	if s := m.Stats(); s.Channels != len(chs) || s.Waiters != 2*len(chs) {
		t.Fatalf("Stats = %+v", s)
	}

	publishAll := func() {
		t.Helper()
		cmds := make(rueidis.Commands, len(chs))
		for i, ch := range chs {
			cmds[i] = pub.B().Publish().Channel(ch).Message("1").Build()
		}
		for i, r := range pub.DoMulti(ctx, cmds...) {
			if n, err := r.AsInt64(); err != nil || n != 1 {
				t.Fatalf("PUBLISH %s reached %d subscribers (%v), want exactly 1", chs[i], n, err)
			}
		}
	}

	publishAll()
	deadline := time.After(mxPatience)
	for i, w := range first {
		select {
		case <-w.C():
		case <-deadline:
			t.Fatalf("first waiter of channel %d not woken", i)
		}
	}
	// Stats takes every connection's lock, so any dispatch that woke a first
	// waiter has finished by now.
	m.Stats()
	for i, w := range second {
		if mxFired(w) {
			t.Fatalf("channel %d: one message woke both waiters", i)
		}
	}

	// With the first waiters gone, the next round wakes the second ones.
	for _, w := range first {
		w.Leave(true)
	}
	publishAll()
	deadline = time.After(mxPatience)
	for i, w := range second {
		select {
		case <-w.C():
		case <-deadline:
			t.Fatalf("second waiter of channel %d not woken", i)
		}
	}
}
