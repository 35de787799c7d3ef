package semaphore_test

// Tests of what a publisher on a waiter's grant channel, who knows no secret,
// can do to it: replay a grant it recorded, or publish notices. Neither may
// grant anything, take a grant away, or make the waiter re-check later.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/pubsubx"
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
			if strings.HasPrefix(m, pubsubx.AddressPrefix+id+" ") && !strings.Contains(m, "~") {
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
