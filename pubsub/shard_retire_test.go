package pubsub_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// A shard connection closed to let its idle channels go is replaced
// make-before-break: its live channels are subscribed on the new connection
// before the old one closes, so an SPUBLISH on a live channel always has a
// subscriber (a lock's grant published then is not counted undelivered and
// taken back), and the live channel's Waiter still hears it afterwards.
// Before this, each retirement left the live channel unsubscribed until its
// new SSUBSCRIBE returned.
func TestShardedRetirementKeepsLiveChannelsHeard(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0)
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc, pubsub.WithLinger(0))
	owner, live := oneShardChannel(ctx, t, c)
	w := mxSubscribe(ctx, t, m, live)
	defer w.Leave(true)

	published, unheard, stop := spublishUntil(ctx, t, rc, live)

	// Each idle channel (same slot as the live one, so the same connection)
	// makes idle channels as many as live ones: the connection is retired,
	// which SHARDNUMSUB shows by the idle channel going.
	const retirements = 40
	for i := range retirements {
		idle := fmt.Sprintf("%s:idle%d", live, i)
		mxSubscribe(ctx, t, m, idle).Leave(true)
		mxEventually(t, mxPatience, func() (bool, string) {
			n := shardNumSub(ctx, t, owner, idle)
			return n == 0, fmt.Sprintf("%s still has %d subscribers: the connection was not retired", idle, n)
		})
	}
	stop()
	if *published < retirements {
		t.Fatalf("only %d SPUBLISHes during %d retirements", *published, retirements)
	}
	if *unheard != 0 {
		t.Errorf("%d of %d SPUBLISHes on the live channel reached no subscriber during %d retirements",
			*unheard, *published, retirements)
	}
	if n := shardNumSub(ctx, t, owner, live); n != 1 {
		t.Errorf("live channel has %d subscribers after the retirements, want 1", n)
	}
	mxFired(w) // a wake from the publisher loop
	if n, err := rc.Do(ctx, rc.B().Spublish().Channel(live).Message("1").Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("SPUBLISH after: %d receivers, %v", n, err)
	}
	mxWaitFired(t, w, live)
	if s := m.Stats(); s.Reconnects != 0 {
		t.Errorf("Stats.Reconnects = %d: a retirement counted as a lost connection", s.Reconnects)
	}
}

// A retirement that cannot finish (the node hangs while the replacement
// subscribes) falls back to dropping the old connection as a lost one: the
// live channel's Waiter is woken to look for itself, and once the node is
// back the channel is subscribed again and the idle one is gone.
func TestShardedRetirementOnAHungNode(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc, pubsub.WithLinger(2*time.Second))
	owner, live := oneShardChannel(ctx, t, c)
	w := mxSubscribe(ctx, t, m, live)
	defer w.Leave(true)
	idle := live + ":idle"
	mxSubscribe(ctx, t, m, idle).Leave(true)
	// The retirement starts when the idle channel's linger ends, on a node
	// paused by then.
	if err := owner.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Resume() })
	// Woken once the linger (2s), the replacement's SSUBSCRIBE (3s) and a
	// PING on the old connection (3s) have run out.
	select {
	case <-w.C():
	case <-time.After(8*time.Second + mxPatience):
		t.Fatal("the live channel's Waiter was not woken after the retirement failed")
	}
	if err := owner.Resume(); err != nil {
		t.Fatal(err)
	}
	// Live: subscribed again by the Multiplexer; one subscriber: the
	// connections it gave up (whose SSUBSCRIBEs the paused node ran late)
	// are gone.
	mxEventually(t, mxPatience, func() (bool, string) {
		l, i := shardNumSub(ctx, t, owner, live), shardNumSub(ctx, t, owner, idle)
		return w.Live() && l == 1 && i == 0, fmt.Sprintf("Live %v; subscribers: live channel %d (want 1), idle channel %d (want 0)", w.Live(), l, i)
	})
	mxFired(w)
	if n, err := rc.Do(ctx, rc.B().Spublish().Channel(live).Message("1").Build()).AsInt64(); err != nil || n < 1 {
		t.Fatalf("SPUBLISH after: %d receivers, %v", n, err)
	}
	mxWaitFired(t, w, live)
}

// busyPublishScript spins for ARGV[1] microseconds, then SPUBLISHes on
// KEYS[1] and returns the number of receivers.
const busyPublishScript = busyLoop + `return redis.call('SPUBLISH', KEYS[1], '1')`

// A retirement whose replacement meets BUSY (another client's script runs
// long) keeps the old connection, which still answers: the live channel
// stays subscribed, and the SPUBLISH the script ends with is heard. (It was
// dropped, as a lost one, before a review found it.)
func TestShardedRetirementDuringBusyKeepsTheOldConnection(t *testing.T) {
	c := redistest.NewCluster(t, 1, 0, redistest.WithArgs("--lua-time-limit", "50"))
	ctx := mxContext(t)
	noCache := func(o *rueidis.ClientOption) { o.DisableCache = true }
	rc := redistest.ClusterClient(t, c, noCache)
	m := mxNew(t, rc, pubsub.WithLinger(0))
	srv := c.Masters[0]
	prefix := redistest.KeyPrefix(t)
	live, idle := prefix+"{b}:live", prefix+"{b}:idle"
	w := mxSubscribe(ctx, t, m, live)
	defer w.Leave(true)
	iw := mxSubscribe(ctx, t, m, idle)

	sc := noCacheClient(t, srv)
	res := make(chan int64, 1)
	go func() {
		n, err := sc.Do(context.Background(), sc.B().Eval().Script(busyPublishScript).Numkeys(1).Key(live).
			Arg(strconv.FormatInt((1500*time.Millisecond).Microseconds(), 10)).Build()).AsInt64()
		if err != nil {
			t.Errorf("script: %v", err)
		}
		res <- n
	}()
	t.Cleanup(func() { _, _ = srv.Do(context.Background(), "SCRIPT", "KILL") })
	waitBusy(ctx, t, srv)
	iw.Leave(true) // idle as many as live: the connection is retired, during BUSY
	wentDead := false
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && !wentDead {
		wentDead = !w.Live()
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	var n int64
	select {
	case n = <-res:
	case <-time.After(mxPatience):
		t.Fatal("script did not end")
	}
	if wentDead {
		t.Errorf("the live channel stopped being live during a retirement that met BUSY")
	}
	if n != 1 {
		t.Errorf("the SPUBLISH at the script's end reached %d subscribers, want 1", n)
	}
}

// While a slot of a master moves back and forth, retirements of that
// master's shard connection go on: a live channel of another slot, which
// never moves, is heard by every SPUBLISH. (A replacement that met MOVED for
// the moving slot dropped the old connection with every slot's channels,
// before a review found it.)
func TestShardedRetirementWhileAnotherSlotMoves(t *testing.T) {
	c := redistest.NewCluster(t, 2, 0)
	ctx := mxContext(t)
	rc := redistest.ClusterClient(t, c)
	m := mxNew(t, rc, pubsub.WithLinger(0))
	prefix := redistest.KeyPrefix(t)
	// Two channels of different slots on the same master.
	var x *redistest.Server
	var steady, moving string
	var movingSlot int64
	for i := 0; i < 1000 && moving == ""; i++ {
		ch := prefix + "{s" + strconv.Itoa(i) + "}:unlock"
		sl, err := c.KeySlot(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.Owner(ctx, sl)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case x == nil:
			x, steady = o, ch
		case o == x:
			moving, movingSlot = ch, sl
		}
	}
	y := c.Masters[0]
	if y == x {
		y = c.Masters[1]
	}
	ws := mxSubscribe(ctx, t, m, steady)
	defer ws.Leave(true)
	wm := mxSubscribe(ctx, t, m, moving)
	defer wm.Leave(true)

	// SPUBLISH on x itself: the steady slot never leaves it.
	published, unheard, stopPublishing := spublishUntil(ctx, t, redistest.Client(t, x), steady)
	stop := make(chan struct{})
	retDone := make(chan struct{})
	go func() {
		defer close(retDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			w, err := m.Subscribe(ctx, steady+":idle"+strconv.Itoa(i))
			if err != nil {
				t.Errorf("Subscribe: %v", err)
				return
			}
			w.Leave(true)
		}
	}()
	to, from := y, x
	for range 20 {
		if err := c.MoveSlot(ctx, movingSlot, to, nil); err != nil {
			t.Fatal(err)
		}
		to, from = from, to
	}
	close(stop)
	stopPublishing()
	<-retDone
	if *unheard != 0 {
		t.Errorf("%d of %d SPUBLISHes on a channel whose slot never moved reached nobody", *unheard, *published)
	}
	mxEventually(t, mxPatience, func() (bool, string) {
		return ws.Live() && wm.Live(), "not live again"
	})
}

// spublishUntil SPUBLISHes on ch through rc, one after another, until the
// stop it returns is called; then published and unheard (no subscriber
// reached) count them.
func spublishUntil(ctx context.Context, t *testing.T, rc rueidis.Client, ch string) (published, unheard *int64, stop func()) {
	published, unheard = new(int64), new(int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := rc.Do(ctx, rc.B().Spublish().Channel(ch).Message("0").Build()).AsInt64()
			if err != nil {
				t.Errorf("SPUBLISH %s: %v", ch, err)
				return
			}
			*published++
			if n == 0 {
				*unheard++
			}
		}
	})
	return published, unheard, func() { close(done); wg.Wait() }
}

// oneShardChannel returns a channel of the test's and the master its slot
// is on.
func oneShardChannel(ctx context.Context, t *testing.T, c *redistest.Cluster) (*redistest.Server, string) {
	t.Helper()
	for srv, ch := range shardChannels(ctx, t, c, redistest.KeyPrefix(t)) {
		return srv, ch
	}
	t.Fatal("no channel on any master")
	return nil, ""
}
