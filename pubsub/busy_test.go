package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// busyScript spins for ARGV[1] microseconds. Past the server's script time
// limit, every other connection gets BUSY replies until it ends (or SCRIPT
// KILL: it writes nothing).
const busyScript = busyLoop + `return 1`

// busyLoop is the spin of busyScript.
const busyLoop = `
local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
while true do
  t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) - start >= limit then break end
end
`

// busyServer starts a Redis that answers BUSY 50ms into a long script.
func busyServer(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Owned(t, redistest.WithArgs("--lua-time-limit", "50"))
}

// noCacheClient is a client whose handshake needs no command that Redis
// refuses while a script is busy (CLIENT TRACKING), so that a connection
// opened during BUSY reaches the SUBSCRIBE.
func noCacheClient(t *testing.T, srv *redistest.Server, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return redistest.Client(t, srv, append([]func(*rueidis.ClientOption){func(o *rueidis.ClientOption) {
		o.DisableCache = true
	}}, opts...)...)
}

// busyEval is the command that keeps the server busy for d.
func busyEval(c rueidis.Client, d time.Duration) rueidis.Completed {
	return c.B().Eval().Script(busyScript).Numkeys(0).Arg(strconv.FormatInt(d.Microseconds(), 10)).Build()
}

// startBusy runs busyEval on its own connection and returns once the server
// answers BUSY; the returned channel is closed when the script has ended. The
// script is killed at cleanup if still running.
func startBusy(ctx context.Context, t *testing.T, srv *redistest.Server, d time.Duration) <-chan struct{} {
	t.Helper()
	c := noCacheClient(t, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Do(context.Background(), busyEval(c, d)).Error() // killed or ended: either way it is over
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_, _ = srv.Do(context.Background(), "SCRIPT", "KILL")
			<-done
		}
	})
	waitBusy(ctx, t, srv)
	return done
}

// waitBusy polls until the server answers PING with BUSY.
func waitBusy(ctx context.Context, t *testing.T, srv *redistest.Server) {
	t.Helper()
	mxEventually(t, mxPatience, func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := srv.Do(pctx, "PING")
		return err != nil && strings.HasPrefix(err.Error(), "BUSY"), "PING: " + errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return "OK"
	}
	return err.Error()
}

// waitDone waits for ch with the usual patience.
func waitDone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(mxPatience):
		t.Fatalf("%s: not done within %v", what, mxPatience)
	}
}

// childEnv marks a test binary re-executed to run one crash-prone test.
const childEnv = "RELOCK_PUBSUB_CHILD"

// inChild runs test name in a child process (this test binary again) and
// reports whether the caller is that child. A panic on a goroutine the test
// cannot recover (rueidis's reader) then fails the parent test instead of
// killing the whole run.
func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process running %s failed: %v\n%s", t.Name(), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child process did not run %s:\n%s", t.Name(), out)
	}
	return false
}

// 16. A channel going idle while another client's script keeps Redis busy
// must not crash the process: rueidis follows every UNSUBSCRIBE with a PING
// and takes a BUSY reply to the UNSUBSCRIBE for the PING's, then panics on
// its reader goroutine when the real reply to the PING arrives.
func TestLeaveWhileBusy(t *testing.T) {
	if !inChild(t) {
		return
	}
	ctx := mxContext(t)
	srv := busyServer(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, noCacheClient(t, srv), pubsub.WithLinger(0))
	chA, chB, chC := prefix+"a", prefix+"b", prefix+"c"
	a := mxSubscribe(ctx, t, m, chA)
	b := mxSubscribe(ctx, t, m, chB)
	defer b.Leave(true)

	busy := startBusy(ctx, t, srv, 2*time.Second)
	a.Leave(true) // idle channel: before the fix, an UNSUBSCRIBE that crashed the process
	waitDone(t, busy, "busy script")

	// The idle channel is eventually dropped, the live one kept.
	mxNumSubIs(ctx, t, srv, 0, chA)
	mxNumSubIs(ctx, t, srv, 1, chB)
	mxPublish(ctx, t, pub, chB, "1")
	mxWaitFired(t, b, "waiter of the live channel")
	c := mxSubscribe(ctx, t, m, chC)
	defer c.Leave(true)
	mxPublish(ctx, t, pub, chC, "1")
	mxWaitFired(t, c, "waiter of a channel subscribed after the busy script")
	if s := m.Stats(); s.Channels != 2 || s.Waiters != 2 {
		t.Fatalf("Stats = %+v, want 2 channels and 2 waiters", s)
	}
}

// 17. A resubscription after a lost connection that meets BUSY keeps its
// channels and retries: the waiter is woken once its channel is subscribed
// again, instead of being detached for good.
func TestResubscribeRetriesAfterBusy(t *testing.T) {
	ctx := mxContext(t)
	srv := busyServer(t)
	pub := redistest.Client(t, srv)
	ch := redistest.KeyPrefix(t) + "resub"
	m := mxNew(t, noCacheClient(t, srv))
	w := mxSubscribe(ctx, t, m, ch)
	defer w.Leave(true)

	ids := subscriberIDs(ctx, t, srv)
	if len(ids) != 1 {
		t.Fatalf("%d subscriber connections, want 1", len(ids))
	}
	// Kill the subscriber connection and start the script in one pipeline,
	// so that the resubscription finds the server busy.
	admin := noCacheClient(t, srv)
	res := make(chan []rueidis.RedisResult, 1)
	go func() {
		res <- admin.DoMulti(context.Background(),
			admin.B().ClientKill().Id(mustInt(t, ids[0])).Build(),
			busyEval(admin, 1500*time.Millisecond))
	}()
	var rs []rueidis.RedisResult
	select {
	case rs = <-res:
	case <-time.After(mxPatience):
		t.Fatal("CLIENT KILL + busy script did not return")
	}
	for i, r := range rs {
		if err := r.Error(); err != nil {
			t.Fatalf("pipeline command %d: %v", i, err)
		}
	}
	mxWaitFired(t, w, "waiter after its channel was resubscribed")
	mxNumSubIs(ctx, t, srv, 1, ch)
	if err := w.Err(); err != nil {
		t.Fatalf("Err after the resubscription = %v", err)
	}
	if s := m.Stats(); s.Channels != 1 || s.Waiters != 1 || s.Reconnects < 1 {
		t.Fatalf("Stats = %+v, want 1 channel, 1 waiter, a reconnect", s)
	}
	mxPublish(ctx, t, pub, ch, "1")
	mxWaitFired(t, w, "waiter by a message after the resubscription")
}

func subscriberIDs(ctx context.Context, t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	msg, err := srv.Do(ctx, "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	list, err := msg.ToString()
	if err != nil {
		t.Fatal(err)
	}
	return mxSubscriberIDs(list)
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// 18. BUSY on SUBSCRIBE is transient: a blocking Subscribe waits it out, and
// one whose context ends meanwhile says that Redis was busy.
func TestSubscribeWaitsOutBusy(t *testing.T) {
	ctx := mxContext(t)
	srv := busyServer(t)
	pub := redistest.Client(t, srv)
	prefix := redistest.KeyPrefix(t)
	m := mxNew(t, noCacheClient(t, srv))
	warm := mxSubscribe(ctx, t, m, prefix+"warm") // the connection is open: what meets BUSY is the SUBSCRIBE
	defer warm.Leave(true)

	t.Run("waits until the script ends", func(t *testing.T) {
		startBusy(ctx, t, srv, time.Second)
		ch := prefix + "patient"
		w, err := m.Subscribe(ctx, ch)
		if err != nil {
			t.Fatalf("Subscribe while Redis is busy: %v, want it to wait until the script ends", err)
		}
		defer w.Leave(true)
		if n := mxPublish(ctx, t, pub, ch, "1"); n != 1 {
			t.Fatalf("PUBLISH after Subscribe returned reached %d subscribers", n)
		}
		mxWaitFired(t, w, "waiter subscribed during BUSY")
	})

	t.Run("context ends while busy", func(t *testing.T) {
		startBusy(ctx, t, srv, 30*time.Second) // killed at cleanup
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		w, err := m.Subscribe(sctx, prefix+"impatient")
		if err == nil {
			w.Leave(true)
			t.Fatal("Subscribe succeeded while Redis was busy")
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "BUSY") {
			t.Fatalf("Subscribe = %v, want the context's error along with the last BUSY", err)
		}
		var rerr *rueidis.RedisError
		if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "BUSY") {
			t.Fatalf("Subscribe = %v: the BUSY reply is not reachable with errors.As", err)
		}
	})
	// The abandoned channel is not left behind once Redis answers again.
	mxNumSubIs(ctx, t, srv, 0, prefix+"impatient", prefix+"patient")
	mxEventually(t, mxPatience, func() (bool, string) {
		s := m.Stats()
		return s.Channels == 1 && s.Waiters == 1, fmt.Sprintf("Stats = %+v, want the warm channel only", s)
	})
}

// 19. A channel denied by ACL fails only its own waiters, also when Redis
// refused a whole SUBSCRIBE batch because of it.
func TestDeniedChannelIsolated(t *testing.T) {
	ctx := mxContext(t)
	srv := redistest.Owned(t)
	pub := redistest.Client(t, srv)
	if _, err := srv.Do(ctx, "ACL", "SETUSER", "u", "on", ">pw", "~*", "allchannels", "+@all"); err != nil {
		t.Fatal(err)
	}
	m := mxNew(t, noCacheClient(t, srv, func(o *rueidis.ClientOption) {
		o.Username, o.Password = "u", "pw"
	}))
	allowed := []string{"allowed:1", "allowed:2", "allowed:3"}
	ws := make([]*pubsub.Waiter, len(allowed))
	for i, ch := range allowed {
		ws[i] = mxSubscribe(ctx, t, m, ch)
		defer ws[i].Leave(true)
	}
	denied := mxSubscribe(ctx, t, m, "denied:1")
	defer denied.Leave(true)

	// Revoking a channel disconnects the user's subscribers (Redis 7): the
	// resubscription batch names allowed and denied channels alike.
	if _, err := srv.Do(ctx, "ACL", "SETUSER", "u", "resetchannels", "&allowed:*"); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		mxWaitFired(t, w, "allowed waiter "+strconv.Itoa(i)+" after the resubscription")
	}
	mxNumSubIs(ctx, t, srv, 1, allowed...)
	mxWaitFired(t, denied, "denied waiter, told of its failure")
	if err := denied.Err(); !errors.Is(err, pubsub.ErrSubscriptionRefused) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("denied waiter: Err = %v, want ErrSubscriptionRefused with NOPERM", err)
	}
	for i, w := range ws {
		if err := w.Err(); err != nil {
			t.Fatalf("allowed waiter %d: Err = %v", i, err)
		}
	}
	for i, ch := range allowed {
		mxPublish(ctx, t, pub, ch, "1")
		mxWaitFired(t, ws[i], "allowed waiter "+strconv.Itoa(i)+" by a message")
	}
	if s := m.Stats(); s.Channels != len(allowed) {
		t.Fatalf("Stats = %+v, want %d channels (the denied one dropped)", s, len(allowed))
	}
	if _, err := m.Subscribe(ctx, "denied:2"); !errors.Is(err, pubsub.ErrSubscriptionRefused) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Subscribe to a denied channel = %v, want ErrSubscriptionRefused with NOPERM", err)
	}
}
