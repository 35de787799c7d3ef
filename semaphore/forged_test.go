package semaphore_test

// Tests of what a publisher on a waiter's grant channel, who knows no secret,
// can do to it: replay a grant it recorded, or publish notices. Neither may
// grant anything, take a grant away, or make the waiter re-check later.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// gate holds back the pub/sub messages of a Client's connections while shut,
// and delivers them in order when opened: a Client whose process is paused,
// or whose connection is slow, as far as its waiters can tell.
type gate struct {
	mu   sync.Mutex
	shut bool
	held []rueidis.PubSubMessage
	on   []func(rueidis.PubSubMessage)
	done int // messages delivered to the multiplexer
}

func (g *gate) pass(on func(rueidis.PubSubMessage), m rueidis.PubSubMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.held, g.on = append(g.held, m), append(g.on, on)
		return
	}
	on(m)
	g.done++
}

// delivered returns how many messages the multiplexer has been given.
func (g *gate) delivered() int { g.mu.Lock(); defer g.mu.Unlock(); return g.done }

func (g *gate) close() { g.mu.Lock(); g.shut = true; g.mu.Unlock() }

// open delivers what was held back, in order, and lets messages through.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, m := range g.held {
		g.on[i](m)
		g.done++
	}
	g.held, g.on, g.shut = nil, nil, false
}

// heldBack returns the messages held back so far.
func (g *gate) heldBack() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, m := range g.held {
		out = append(out, m.Message)
	}
	return out
}

type gatedClient struct {
	rueidis.Client
	g *gate
}

func (c gatedClient) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return gatedDedicated{DedicatedClient: dc, g: c.g}, cancel
}

type gatedDedicated struct {
	rueidis.DedicatedClient
	g *gate
}

func (d gatedDedicated) SetPubSubHooks(h rueidis.PubSubHooks) <-chan error {
	if on := h.OnMessage; on != nil {
		h.OnMessage = func(m rueidis.PubSubMessage) { d.g.pass(on, m) }
	}
	return d.DedicatedClient.SetPubSubHooks(h)
}

// gatedClient is e.client whose pub/sub messages pass through a gate.
func (e *env) gatedClient(opts ...rlock.Option) (*rlock.Client, *gate) {
	e.t.Helper()
	g := &gate{}
	c := e.clientOn(gatedClient{Client: redistest.Client(e.t, e.srv), g: g}, opts...)
	// Opened before the Client closes (cleanups run last first): nothing
	// stays held back.
	e.t.Cleanup(g.open)
	return c, g
}

func (e *env) clientOn(rc rueidis.Client, opts ...rlock.Option) *rlock.Client {
	e.t.Helper()
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// stallClient runs every command; once armed, it holds back the reply of the
// next sem_acquire.lua that queues (ARGV[7] "1") until resumed: the waiter
// is queued in Redis but busy, so that messages to it pile up before it
// reads any.
type stallClient struct {
	rueidis.Client
	armed  atomic.Bool
	ran    chan struct{}
	resume chan struct{}
	once   sync.Once
}

// letGo lets the held reply go (idempotent).
func (c *stallClient) letGo() { c.once.Do(func() { close(c.resume) }) }

func newStallClient(rc rueidis.Client) *stallClient {
	return &stallClient{Client: rc, ran: make(chan struct{}), resume: make(chan struct{})}
}

func (c *stallClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	// EVALSHA sha 6 KEYS[1..6] ARGV[1..12]; KEYS[6] is the tombstone.
	queues := len(args) == 21 && redistest.IsScript(args) && args[2] == "6" &&
		strings.Contains(args[8], ":gone:") && args[15] == "1"
	r := c.Client.Do(ctx, cmd)
	if queues && c.armed.CompareAndSwap(true, false) {
		close(c.ran)
		<-c.resume
	}
	return r
}

// stalledClient is e.client whose next queueing attempt, once armed, has its
// reply held back (see stallClient).
// Its pub/sub messages pass through an open gate, which counts them.
func (e *env) stalledClient(opts ...rlock.Option) (*rlock.Client, *stallClient, *gate) {
	e.t.Helper()
	g := &gate{}
	sc := newStallClient(gatedClient{Client: redistest.Client(e.t, e.srv), g: g})
	c := e.clientOn(sc, opts...)
	e.t.Cleanup(sc.letGo)
	return c, sc, g
}

// stalled waits until the armed attempt ran (its waiter is queued).
func (e *env) stalled(sc *stallClient) {
	e.t.Helper()
	select {
	case <-sc.ran:
	case <-e.ctx.Done():
		e.t.Fatal("the queueing attempt never ran")
	}
}

// queuedID waits until the queue holds one entry more than before and
// returns the permit id of its last entry.
func (e *env) queuedID(name string, n int) string {
	e.t.Helper()
	var q []string
	waitFor(e.t, 5*time.Second, "waiter queued", func() bool { q = e.queue(name); return len(q) == n })
	id, _, _ := strings.Cut(q[n-1], "/")
	return id
}

// TestReplayedGrantAfterLapse records the grant message to a waiter that
// does not take it up within its claim window (its messages are held back),
// so that the permit goes to the next waiter and the first queues again under
// the same id and secret; the recorded grant, published again, must not make
// the first waiter's Acquire succeed while the other holds the only permit.
func TestReplayedGrantAfterLapse(t *testing.T) {
	e := ownedEnv(t)
	const name = "replay"
	holder := e.sem(e.client(), name, 1)
	wc, g := e.gatedClient(rlock.WithClaimWindow(time.Second))
	w := e.sem(wc, name, 1)
	x := e.sem(e.client(), name, 1)
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1)) // scripts loaded
	held := mustAcquire(t, holder, e.ctx, 1)
	chW := goAcquire(w, e.ctx, 1)
	id := e.queuedID(name, 1)
	chX := goAcquire(x, e.ctx, 1)
	e.queuedID(name, 2)

	g.close()
	start := time.Now()
	mustRelease(t, holder, held) // grants the permit to w, for its claim window
	var grant string
	waitFor(t, 5*time.Second, "the grant to w held back", func() bool {
		for _, m := range g.heldBack() {
			if strings.HasPrefix(m, mux.AddressPrefix+id+" ") && !strings.Contains(m, "~") {
				grant = m
				return true
			}
		}
		return false
	})
	// w never claims: x, told when the claim lapses, takes the permit then.
	rx := receive(t, chX, 10*time.Second, "x behind w's lapsed claim")
	t.Logf("x acquired %v after the release", rx.at.Sub(start))
	g.open() // w reads its grant late, re-checks and queues again
	e.queuedID(name, 1)
	if st := e.state(x); st != (semaphore.State{Limit: 1, Held: 1, Queued: 1}) {
		t.Fatalf("state after w queued again = %s, want x's permit held and w queued", stateString(st))
	}

	// Someone who recorded the grant to w publishes it again.
	if n := e.publish(semaphore.GrantChannel(w), grant); n != 1 {
		t.Fatalf("replayed grant reached %d subscribers, want w's Client", n)
	}
	stillBlocked(t, chW, time.Second, "w sent the replay of its lapsed grant while x holds the permit")
	if st := e.state(x); st != (semaphore.State{Limit: 1, Held: 1, Queued: 1}) {
		t.Errorf("state after the replay = %s, want x's permit held and w queued", stateString(st))
	}
	mustRelease(t, x, rx.ctx)
	rw := receive(t, chW, prompt, "w after x released")
	mustRelease(t, w, rw.ctx)
}

// TestForgedNoticeKeepsGrant publishes, right after a release granted the
// permit to a queued waiter, a notice with the longest delay on the waiter's
// grant channel. Both reach the waiter while the reply of its queueing
// attempt is held back, so that it reads neither before the forged one came.
// The waiter must still take its grant at once, not sleep through its claim
// window.
func TestForgedNoticeKeepsGrant(t *testing.T) {
	e := ownedEnv(t)
	const name = "forgednotice"
	holder := e.sem(e.client(), name, 1)
	wc, sc, g := e.stalledClient()
	w := e.sem(wc, name, 1)
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1)) // scripts loaded
	held := mustAcquire(t, holder, e.ctx, 1)
	sc.armed.Store(true)
	ch := goAcquire(w, e.ctx, 1)
	e.stalled(sc)
	id := e.queuedID(name, 1)

	before := g.delivered()
	mustRelease(t, holder, held) // grants the permit to w
	if n := e.publish(semaphore.GrantChannel(w), mux.AddressPrefix+id+" ~60000"); n != 1 {
		t.Fatalf("forged notice reached %d subscribers, want w's Client", n)
	}
	waitFor(t, 5*time.Second, "the grant and the notice delivered", func() bool { return g.delivered() == before+2 })
	start := time.Now()
	sc.letGo()
	// Well within the claim window (3s): the grant, not a re-check.
	r := receive(t, ch, time.Second, "w after its grant and a forged notice")
	t.Logf("w acquired %v after its attempt returned", r.at.Sub(start))
	mustRelease(t, w, r.ctx)
}

// TestForgedNoticeKeepsEarlierRecheck hands the permit to a waiter that never
// claims it (its messages are held back), so that the waiter behind it is
// told to re-check when the claim lapses; a forged notice with the longest
// delay comes right after that notice, while the second waiter's attempt is
// held back. The second waiter must re-check when the claim lapses, not at
// its own planned re-check (10s).
func TestForgedNoticeKeepsEarlierRecheck(t *testing.T) {
	e := ownedEnv(t)
	const name = "forgedrecheck"
	holder := e.sem(e.client(), name, 1)
	hc, hung := e.gatedClient(rlock.WithClaimWindow(time.Second))
	h := e.sem(hc, name, 1)
	xc, sc, g := e.stalledClient()
	x := e.sem(xc, name, 1)
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1)) // scripts loaded
	held := mustAcquire(t, holder, e.ctx, 1)
	chH := goAcquire(h, e.ctx, 1)
	e.queuedID(name, 1)
	sc.armed.Store(true)
	chX := goAcquire(x, e.ctx, 1)
	e.stalled(sc)
	id := e.queuedID(name, 2)

	hung.close()
	start := time.Now()
	before := g.delivered()
	mustRelease(t, holder, held) // to h for 1s; x is told "~1000"
	if n := e.publish(semaphore.GrantChannel(x), mux.AddressPrefix+id+" ~60000"); n != 1 {
		t.Fatalf("forged notice reached %d subscribers, want x's Client", n)
	}
	waitFor(t, 5*time.Second, "both notices delivered", func() bool { return g.delivered() == before+2 })
	sc.letGo()
	r := receive(t, chX, 5*time.Second, "x behind h's lapsed claim")
	t.Logf("x acquired %v after the release", r.at.Sub(start))
	mustRelease(t, x, r.ctx)
	hung.open()
	rh := receive(t, chH, prompt, "h after x released")
	mustRelease(t, h, rh.ctx)
}

// TestForgedNoticeKeepsLeaseBound publishes a notice with the longest delay
// to a waiter queued behind a short lease: it must take the permit when the
// lease ends, as it planned, not after the notice's delay.
func TestForgedNoticeKeepsLeaseBound(t *testing.T) {
	e := ownedEnv(t)
	const name = "forgedlease"
	holder := e.sem(e.client(), name, 1)
	w := e.sem(e.client(), name, 1)
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1)) // scripts loaded
	const lease = time.Second
	start := time.Now()
	held := mustAcquire(t, holder, e.ctx, 1, semaphore.WithLease(lease))
	ch := goAcquire(w, e.ctx, 1)
	id := e.queuedID(name, 1)
	if n := e.publish(semaphore.GrantChannel(w), mux.AddressPrefix+id+" ~60000"); n != 1 {
		t.Fatalf("forged notice reached %d subscribers, want w's Client", n)
	}
	r := receive(t, ch, lease+3*time.Second, "w behind a 1s lease, sent a forged notice")
	t.Logf("w acquired %v after the holder", r.at.Sub(start))
	waitDone(t, held, time.Second, "the holder's permit context, its lease over")
	mustRelease(t, w, r.ctx)
}
