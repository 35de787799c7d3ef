package rlock_test

// Forged notices: anyone allowed to publish on a waiter's grant channel can
// send it "re-check in N ms". Such a message may make a waiter re-check
// sooner, nothing else: it never displaces a hand-off that came before it,
// nor a notice that has the waiter re-check sooner, and never postpones the
// re-check the waiter planned.

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
)

// fnGate holds back the pub/sub messages of a Client's connections while
// shut, delivering them in order when opened (a paused process, as far as its
// waiters can tell), and counts the messages it delivered.
type fnGate struct {
	mu   sync.Mutex
	shut bool
	held []func()
	done int
}

func (g *fnGate) pass(on func(rueidis.PubSubMessage), m rueidis.PubSubMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.held = append(g.held, func() { on(m) })
		return
	}
	on(m)
	g.done++
}

func (g *fnGate) close() { g.mu.Lock(); g.shut = true; g.mu.Unlock() }

func (g *fnGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, deliver := range g.held {
		deliver()
		g.done++
	}
	g.held, g.shut = nil, false
}

func (g *fnGate) delivered() int { g.mu.Lock(); defer g.mu.Unlock(); return g.done }

// fnClient passes its pub/sub messages through a gate and, once armed, holds
// back the reply of the next acquire.lua that queues (ARGV[4] "1") until let
// go: its waiter is queued in Redis but busy, so that messages to it pile up
// before it reads any.
type fnClient struct {
	rueidis.Client
	g      *fnGate
	armed  atomic.Bool
	ran    chan struct{}
	resume chan struct{}
	once   sync.Once
}

func (c *fnClient) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return fnDedicated{DedicatedClient: dc, g: c.g}, cancel
}

type fnDedicated struct {
	rueidis.DedicatedClient
	g *fnGate
}

func (d fnDedicated) SetPubSubHooks(h rueidis.PubSubHooks) <-chan error {
	if on := h.OnMessage; on != nil {
		h.OnMessage = func(m rueidis.PubSubMessage) { d.g.pass(on, m) }
	}
	return d.DedicatedClient.SetPubSubHooks(h)
}

func (c *fnClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	script := len(args) > 2 && redistest.IsScript(args)
	// acquire.lua: EVALSHA sha 7 KEYS[1..7] ARGV[1..13], KEYS[3] the
	// tombstone; rw_acquire.lua: 9 KEYS, KEYS[8] the tombstone, 13 ARGV.
	queues := script && len(args) == 23 && args[2] == "7" && strings.Contains(args[5], ":gone:") && args[13] == "1" ||
		script && len(args) == 25 && args[2] == "9" && strings.Contains(args[10], ":gone:") && args[16] == "1"
	r := c.Client.Do(ctx, cmd)
	if queues && c.armed.CompareAndSwap(true, false) {
		close(c.ran)
		<-c.resume
	}
	return r
}

func (c *fnClient) letGo() { c.once.Do(func() { close(c.resume) }) }

// fnClientOn makes an rlock Client on an fnClient.
func (e *ftEnv) fnClient(opts ...rlock.Option) (*rlock.Client, *fnClient) {
	e.t.Helper()
	fc := &fnClient{Client: redistest.Client(e.t, e.srv), g: &fnGate{}, ran: make(chan struct{}), resume: make(chan struct{})}
	c := e.clientOn(fc, opts...)
	// Run before the Client closes (cleanups run last first).
	e.t.Cleanup(fc.letGo)
	e.t.Cleanup(fc.g.open)
	return c, fc
}

func (e *ftEnv) stalled(fc *fnClient) {
	e.t.Helper()
	select {
	case <-fc.ran:
	case <-e.ctx.Done():
		e.t.Fatal("the queueing attempt never ran")
	}
}

// queuedOwner waits until n owners are queued for lock name and returns the
// last one.
func (e *ftEnv) queuedOwner(name string, n int) string {
	e.t.Helper()
	var q []string
	e.eventually(ftPatience, "waiter queued", func() bool {
		var err error
		q, err = e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.lockKey(name)+":queue").Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			e.t.Fatal(err)
		}
		return len(q) == n
	})
	owner, _, _ := strings.Cut(q[n-1], "/")
	return owner
}

// forgeNotice publishes "re-check in a minute" to owner of lock base (the
// Mutex's key, or an RWMutex's).
func (e *ftEnv) forgeNotice(base, owner string) {
	e.t.Helper()
	client := owner[:strings.LastIndex(owner, ":")]
	msg, err := e.srv.Do(e.ctx, "PUBLISH", base+":to:"+client, mux.AddressPrefix+owner+" ~60000")
	if err != nil {
		e.t.Fatal(err)
	}
	if n, _ := msg.AsInt64(); n != 1 {
		e.t.Fatalf("forged notice reached %d subscribers, want the waiter's Client", n)
	}
}

type fnResult struct {
	ctx context.Context
	err error
	at  time.Time
}

func fnGoLock(m *rlock.Mutex, ctx context.Context) <-chan fnResult {
	ch := make(chan fnResult, 1)
	go func() {
		lc, err := m.Lock(ctx)
		ch <- fnResult{ctx: lc, err: err, at: time.Now()}
	}()
	return ch
}

func fnAwait(t *testing.T, ch <-chan fnResult, timeout time.Duration, what string) fnResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r
	case <-time.After(timeout):
		t.Fatalf("%s: Lock still blocked after %v", what, timeout)
		return fnResult{}
	}
}

func fnMustLock(t *testing.T, m *rlock.Mutex, ctx context.Context, opts ...rlock.LockOption) context.Context {
	t.Helper()
	lc, err := m.Lock(ctx, opts...)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return lc
}

func fnMustUnlock(t *testing.T, m *rlock.Mutex, lc context.Context) {
	t.Helper()
	if err := m.Unlock(lc); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestForgedNoticeKeepsHandOff publishes, right after an Unlock handed the
// lock to a queued waiter, a notice with the longest delay on the waiter's
// grant channel. Both reach the waiter while the reply of its queueing
// attempt is held back, so that it reads neither before the forged one came.
// The waiter must still take the lock at once, not sleep through its claim
// window.
func TestForgedNoticeKeepsHandOff(t *testing.T) {
	e := ftNewEnv(t)
	const name = "forgednotice"
	holder := e.client().Mutex(name)
	wc, fc := e.fnClient()
	w := wc.Mutex(name)
	fnMustUnlock(t, holder, fnMustLock(t, holder, e.ctx)) // scripts loaded
	held := fnMustLock(t, holder, e.ctx)
	fc.armed.Store(true)
	ch := fnGoLock(w, e.ctx)
	e.stalled(fc)
	owner := e.queuedOwner(name, 1)

	before := fc.g.delivered()
	fnMustUnlock(t, holder, held) // hands the lock to w
	e.forgeNotice(e.lockKey(name), owner)
	e.eventually(ftPatience, "the hand-off and the notice delivered", func() bool { return fc.g.delivered() == before+2 })
	start := time.Now()
	fc.letGo()
	// Well within the claim window (3s): the hand-off, not a re-check.
	r := fnAwait(t, ch, time.Second, "w after its hand-off and a forged notice")
	t.Logf("w locked %v after its attempt returned", r.at.Sub(start))
	fnMustUnlock(t, w, r.ctx)
}

// TestForgedNoticeKeepsEarlierMutexRecheck hands the lock to a waiter that
// never claims it (its messages are held back), so that the waiter behind it
// is told to re-check when the claim lapses; a forged notice with the longest
// delay comes right after that notice, while the second waiter's attempt is
// held back. The second waiter must re-check when the claim lapses, not at
// its own planned re-check (24s).
func TestForgedNoticeKeepsEarlierMutexRecheck(t *testing.T) {
	e := ftNewEnv(t)
	const name = "forgedrecheck"
	holder := e.client().Mutex(name)
	hc, hung := e.fnClient(rlock.WithClaimWindow(time.Second))
	h := hc.Mutex(name)
	xc, fc := e.fnClient()
	x := xc.Mutex(name)
	fnMustUnlock(t, holder, fnMustLock(t, holder, e.ctx)) // scripts loaded
	held := fnMustLock(t, holder, e.ctx)
	chH := fnGoLock(h, e.ctx)
	e.queuedOwner(name, 1)
	fc.armed.Store(true)
	chX := fnGoLock(x, e.ctx)
	e.stalled(fc)
	owner := e.queuedOwner(name, 2)

	hung.g.close()
	before := fc.g.delivered()
	start := time.Now()
	fnMustUnlock(t, holder, held) // to h for 1s; x is told "~1000"
	e.forgeNotice(e.lockKey(name), owner)
	e.eventually(ftPatience, "both notices delivered", func() bool { return fc.g.delivered() == before+2 })
	fc.letGo()
	r := fnAwait(t, chX, 5*time.Second, "x behind h's lapsed claim")
	t.Logf("x locked %v after the release", r.at.Sub(start))
	fnMustUnlock(t, x, r.ctx)
	hung.g.open()
	rh := fnAwait(t, chH, 5*time.Second, "h after x unlocked")
	fnMustUnlock(t, h, rh.ctx)
}

// TestForgedNoticeKeepsMutexLeaseBound publishes a notice with the longest
// delay to a waiter queued behind a short lease: it must take the lock when
// the lease ends, as it planned, not after the notice's delay.
func TestForgedNoticeKeepsMutexLeaseBound(t *testing.T) {
	e := ftNewEnv(t)
	const name = "forgedlease"
	holder := e.client().Mutex(name)
	w := e.client().Mutex(name)
	fnMustUnlock(t, holder, fnMustLock(t, holder, e.ctx)) // scripts loaded
	const lease = time.Second
	start := time.Now()
	held := fnMustLock(t, holder, e.ctx, rlock.WithLease(lease))
	ch := fnGoLock(w, e.ctx)
	e.forgeNotice(e.lockKey(name), e.queuedOwner(name, 1))
	r := fnAwait(t, ch, lease+3*time.Second, "w behind a 1s lease, sent a forged notice")
	t.Logf("w locked %v after the holder", r.at.Sub(start))
	select {
	case <-held.Done():
	case <-time.After(time.Second):
		t.Error("the holder's lock context is not done after its lease")
	}
	fnMustUnlock(t, w, r.ctx)
}

// TestForgedNoticeKeepsRWHandOff is TestForgedNoticeKeepsHandOff for an
// RWMutex writer queued behind a writer.
func TestForgedNoticeKeepsRWHandOff(t *testing.T) {
	e := ftNewEnv(t)
	const name = "forgedrw"
	holder := e.client().RWMutex(name)
	wc, fc := e.fnClient()
	w := wc.RWMutex(name)
	lc, err := holder.Lock(e.ctx)
	if err == nil {
		err = holder.Unlock(lc) // scripts loaded
	}
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	fc.armed.Store(true)
	ch := make(chan fnResult, 1)
	go func() {
		lc, err := w.Lock(e.ctx)
		ch <- fnResult{ctx: lc, err: err, at: time.Now()}
	}()
	e.stalled(fc)
	var entry string
	e.eventually(ftPatience, "writer queued", func() bool {
		q, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.lockKey(name)+":rw:queue").Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(q) == 1 {
			entry = q[0]
		}
		return len(q) == 1
	})
	owner, _, _ := strings.Cut(entry, "/")

	before := fc.g.delivered()
	if err := holder.Unlock(held); err != nil { // grants the lock to w
		t.Fatal(err)
	}
	e.forgeNotice(e.lockKey(name)+":rw", owner)
	e.eventually(ftPatience, "the grant and the notice delivered", func() bool { return fc.g.delivered() == before+2 })
	start := time.Now()
	fc.letGo()
	r := fnAwait(t, ch, time.Second, "writer after its grant and a forged notice")
	t.Logf("writer locked %v after its attempt returned", r.at.Sub(start))
	if err := w.Unlock(r.ctx); err != nil {
		t.Fatal(err)
	}
}
