package semaphore_test

// Tests of the direct hand-off: a release grants the permits to the waiter at
// the head of the queue in the same script, and tells it on its own Client's
// grant channel with a message that proves itself.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// fencePayload marks the messages the tests publish to flush deliveries; it
// is addressed to a tag no Waiter has, so it wakes nobody.
const fencePayload = mux.AddressPrefix + "fence"

// deliveries records every pub/sub message a Client's connections receive,
// counted below the multiplexer (see countingClient).
type deliveries struct {
	mu   sync.Mutex
	msgs []rueidis.PubSubMessage
}

func (d *deliveries) add(m rueidis.PubSubMessage) {
	d.mu.Lock()
	d.msgs = append(d.msgs, m)
	d.mu.Unlock()
}

// count returns the messages received other than fences, and the fences.
func (d *deliveries) count() (messages, fences int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.msgs {
		if m.Message == fencePayload {
			fences++
		} else {
			messages++
		}
	}
	return messages, fences
}

// flush publishes a fence on every channel subscribed under the test's prefix
// and waits until every fence has reached its subscriber: each Client has then
// received every message published before (Redis delivers them in order).
func (e *env) flush(recs []*deliveries) {
	e.t.Helper()
	want := 0
	for _, rec := range recs {
		_, f := rec.count()
		want += f
	}
	for _, ch := range e.channels() {
		want += int(e.publish(ch, fencePayload))
	}
	waitFor(e.t, 5*time.Second, "the fences delivered", func() bool {
		got := 0
		for _, rec := range recs {
			_, f := rec.count()
			got += f
		}
		return got == want
	})
}

// countingClient is a rueidis.Client whose dedicated connections (the
// multiplexer's pub/sub connections) report every message they receive.
type countingClient struct {
	rueidis.Client
	rec *deliveries
}

func (c countingClient) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return countingDedicated{DedicatedClient: dc, rec: c.rec}, cancel
}

type countingDedicated struct {
	rueidis.DedicatedClient
	rec *deliveries
}

func (d countingDedicated) SetPubSubHooks(h rueidis.PubSubHooks) <-chan error {
	if on := h.OnMessage; on != nil {
		h.OnMessage = func(m rueidis.PubSubMessage) {
			// Recorded after the multiplexer took it: a message the record
			// holds is one the multiplexer has counted (flush waits for
			// the record, then reads both counts).
			on(m)
			d.rec.add(m)
		}
	}
	return d.DedicatedClient.SetPubSubHooks(h)
}

// countedClient is e.client with the messages its pub/sub connections
// receive recorded.
func (e *env) countedClient(opts ...rlock.Option) (*rlock.Client, *deliveries) {
	e.t.Helper()
	rec := &deliveries{}
	rc := countingClient{Client: redistest.Client(e.t, e.srv), rec: rec}
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

// channels lists the pub/sub channels with subscribers under the test's prefix.
func (e *env) channels() []string {
	e.t.Helper()
	msg, err := e.srv.Do(e.ctx, "PUBSUB", "CHANNELS", e.prefix+":*")
	if err != nil {
		e.t.Fatalf("PUBSUB CHANNELS: %v", err)
	}
	chans, err := msg.AsStrSlice()
	if err != nil {
		e.t.Fatalf("PUBSUB CHANNELS: %v", err)
	}
	return chans
}

func (e *env) publish(channel, message string) int64 {
	e.t.Helper()
	msg, err := e.srv.Do(e.ctx, "PUBLISH", channel, message)
	if err != nil {
		e.t.Fatalf("PUBLISH: %v", err)
	}
	n, _ := msg.AsInt64()
	return n
}

func (e *env) commandStats() map[string]int64 {
	e.t.Helper()
	stats, err := e.srv.CommandStats(e.ctx)
	if err != nil {
		e.t.Fatalf("CommandStats: %v", err)
	}
	return stats
}

func (e *env) resetStats() {
	e.t.Helper()
	if _, err := e.srv.Do(e.ctx, "CONFIG", "RESETSTAT"); err != nil {
		e.t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
}

// queueLen is ZCARD of the queue: unlike State, it runs no script, so that it
// does not disturb the counts of scripts.
func (e *env) queueLen(name string) int64 {
	e.t.Helper()
	n, err := e.raw.Do(e.ctx, e.raw.B().Zcard().Key(e.base(name)+":queue").Build()).AsInt64()
	if err != nil {
		e.t.Fatalf("ZCARD: %v", err)
	}
	return n
}

// TestOneDeliveryPerHandoff queues a waiter in each of 8 Clients (standing for
// 8 processes) behind a holder and lets the permit go down the queue, each
// waiter releasing as soon as it holds: every hand-off must reach exactly one
// Client, the next holder's, and its claim notice (see rlock.WithClaimWindow)
// one more, the next waiter's, whatever the number of Clients waiting. Messages
// are counted where each Client's pub/sub connection receives them (and by
// each multiplexer's own statistics), and checked against Redis's own counts
// of PUBLISH calls and of subscribers per channel.
func TestOneDeliveryPerHandoff(t *testing.T) {
	e := ownedEnv(t)
	const (
		name    = "deliveries"
		clients = 8
	)
	holder := semaphore.NewLock(e.client(), name)
	held, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	var recs []*deliveries
	var muxes []*mux.Multiplexer
	done := make(chan error, clients)
	for i := range clients {
		// A long linger keeps every subscription until the count is done.
		c, rec := e.countedClient(rlock.WithPubSub(pubsub.WithLinger(time.Minute)))
		recs = append(recs, rec)
		muxes = append(muxes, c.Core().Mux)
		l := semaphore.NewLock(c, name)
		go func() {
			lockCtx, err := l.Lock(e.ctx)
			if err == nil {
				err = l.Unlock(lockCtx)
			}
			done <- err
		}()
		waitFor(t, 5*time.Second, "waiter "+itoa(int64(i+1))+" queued", func() bool { return e.queueLen(name) == int64(i+1) })
	}
	for _, ch := range e.channels() {
		if n := e.numSub(ch); n != 1 {
			t.Errorf("%d Clients subscribed to %s: a message published there reaches them all, want 1 (a channel per Client)", n, ch)
		}
	}
	e.flush(recs)
	before, muxBefore := 0, int64(0)
	for i, rec := range recs {
		m, f := rec.count()
		before += m
		muxBefore += muxes[i].Stats().Messages - int64(f)
	}
	e.resetStats()

	if err := holder.Unlock(held); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for range clients {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiters not all served 10s after the release")
		}
	}
	stats := e.commandStats()
	e.flush(recs)
	delivered, muxDelivered := -before, -muxBefore
	for i, rec := range recs {
		m, f := rec.count()
		delivered += m
		muxDelivered += muxes[i].Stats().Messages - int64(f)
	}
	if muxDelivered != int64(delivered) {
		t.Errorf("the multiplexers counted %d messages, their connections %d", muxDelivered, delivered)
	}
	// The holder's release and those of the first 7 waiters hand the permit
	// on; the last waiter's finds nobody queued.
	const handoffs = clients
	t.Logf("%d hand-offs: %d messages delivered to the %d waiting Clients, %d PUBLISH calls",
		handoffs, delivered, clients, stats["publish"])
	// Each hand-off but the last also tells the next waiter when the grant's
	// claim window lapses (see rlock.WithClaimWindow): one more message, to
	// that waiter's Client alone.
	const messages = 2*handoffs - 1
	if delivered != messages {
		t.Errorf("%d messages delivered for %d hand-offs, want exactly one per hand-off and one notice per hand-off with a waiter behind", delivered, handoffs)
	}
	if stats["publish"] != messages {
		t.Errorf("%d PUBLISH calls for %d hand-offs, want one per hand-off and one notice per hand-off with a waiter behind", stats["publish"], handoffs)
	}
}

// TestHandoffRunsNoWaiterScript has a waiter queue behind a holder and the
// holder release: the release hands the permit over in its own script, and the
// waiter's Acquire returns holding it without running another: the whole
// acquisition costs the waiter one script, the one that queued it. The waiter's
// Client is contended (its grant channel stays subscribed from an earlier
// wait), as every Client is after its first wait under contention.
func TestHandoffRunsNoWaiterScript(t *testing.T) {
	e := ownedEnv(t)
	const name = "no-script"
	holder := e.sem(e.client(), name, 1)
	waiter := e.sem(e.client(rlock.WithPubSub(pubsub.WithLinger(time.Minute))), name, 1)
	// Scripts are loaded (a first EVALSHA fails with NOSCRIPT, and EVAL follows).
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1))
	held := mustAcquire(t, holder, e.ctx, 1)
	// An earlier wait of the waiter's Client, given up once it was queued
	// (and so subscribed).
	warmCtx, cancelWarm := context.WithCancel(e.ctx)
	warm := goAcquire(waiter, warmCtx, 1)
	waitFor(t, 5*time.Second, "the warm-up waiter queued", func() bool { return e.queueLen(name) == 1 })
	cancelWarm()
	if r := receiveErr(t, warm, 5*time.Second, "warm-up waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("warm-up Acquire: err = %v, want context.Canceled", r.err)
	}
	if n := e.queueLen(name); n != 0 {
		t.Fatalf("queue after the warm-up waiter gave up: %d entries, want none", n)
	}
	if n := e.numSub(semaphore.GrantChannel(waiter)); n != 1 {
		t.Fatalf("subscribers of the waiter's grant channel after its wait = %d, want 1 (it lingers)", n)
	}

	e.resetStats()
	ch := goAcquire(waiter, e.ctx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	queued := e.commandStats()
	mustRelease(t, holder, held)
	r := receive(t, ch, prompt, "waiter")
	after := e.commandStats()
	scripts := func(s map[string]int64) int64 { return redistest.ScriptCalls(s) }
	t.Logf("scripts: %d until the waiter was queued, %d from then until its Acquire returned (the release included)",
		scripts(queued), scripts(after)-scripts(queued))
	if n := scripts(queued); n != 1 {
		t.Errorf("the waiter ran %d scripts to queue, want 1 (acquire-or-queue in one)", n)
	}
	if n := scripts(after) - scripts(queued); n != 1 {
		t.Errorf("%d scripts ran from the release to the waiter's Acquire returning, want 1 (the release)", n)
	}
	if n := waiter.Permits(r.ctx); n != 1 {
		t.Errorf("Permits of the handed-over permit = %d, want 1", n)
	}
	if st := e.state(waiter); st != (semaphore.State{Limit: 1, Held: 1}) {
		t.Errorf("state while the waiter holds = %s, want {Limit 1, Held 1, Queued 0}", stateString(st))
	}
	if _, err := holder.TryAcquire(e.ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("TryAcquire while the waiter holds the handed-over permit: err = %v, want ErrNoPermits", err)
	}
	mustRelease(t, waiter, r.ctx)
	if n := e.available(holder); n != 1 {
		t.Errorf("Available after the waiter released = %d, want 1", n)
	}
}

// TestForgedGrantGrantsNothing publishes grant messages to a queued waiter's
// grant channel, as anyone allowed to publish there could, without knowing the
// secret of its queue entry: the waiter may be woken, but it takes nothing,
// re-checks with Redis, keeps its place and waits on; the real hand-off then
// still reaches it.
func TestForgedGrantGrantsNothing(t *testing.T) {
	e := ownedEnv(t)
	const name = "forged"
	holder := e.sem(e.client(), name, 1)
	waiter := e.sem(e.client(rlock.WithPubSub(pubsub.WithLinger(time.Minute))), name, 1)
	mustRelease(t, holder, mustAcquire(t, holder, e.ctx, 1)) // scripts loaded
	held := mustAcquire(t, holder, e.ctx, 1)
	ch := goAcquire(waiter, e.ctx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	entry := e.queue(name)[0]
	id, _, _ := strings.Cut(entry, "/")
	grant := semaphore.GrantChannel(waiter)
	if n := e.numSub(grant); n != 1 {
		t.Fatalf("subscribers of the waiter's grant channel %s = %d, want 1", grant, n)
	}
	if n := e.publish(e.wakeChannel(name), mux.AddressPrefix+id); n != 0 {
		t.Errorf("a wake on the old wake channel reached %d subscribers, want none: nothing listens there", n)
	}

	e.resetStats()
	wrongMAC := sha1hex("not-the-secret:1")
	for _, forged := range []string{
		mux.AddressPrefix + id + " 1:" + wrongMAC,                       // the grant's shape, a MAC without the secret
		mux.AddressPrefix + id + " 1:" + strings.Repeat("0", 40),        // a made-up MAC
		mux.AddressPrefix + id + " 2:" + wrongMAC,                       // more permits than asked for
		mux.AddressPrefix + id + " 1:" + wrongMAC + ":" + wrongMAC,      // trailing garbage
		mux.AddressPrefix + id + " 1",                                   // no MAC
		mux.AddressPrefix + id + " -1:" + strings.Repeat("a", 40),       // a negative count
		mux.AddressPrefix + id + " 99999999999999999999999:" + wrongMAC, // out of range
		"1", pubsub.WakeAll, // a budget, a wake-all
	} {
		if n := e.publish(grant, forged); n != 1 {
			t.Fatalf("forged message %q reached %d subscribers, want the waiter's Client", forged, n)
		}
	}
	// Woken, the waiter re-checks with Redis rather than trusting any of them.
	waitFor(t, 5*time.Second, "the waiter to re-check", func() bool {
		s := e.commandStats()
		return redistest.ScriptCalls(s) > 0
	})
	stillBlocked(t, ch, 300*time.Millisecond, "waiter sent forged grants")
	if l := e.leases(name); len(l) != 1 || slices.Contains(l, id) {
		t.Errorf("leases after forged grants = %q, want only the holder's", l)
	}
	if q := e.queue(name); len(q) != 1 || q[0] != entry {
		t.Errorf("queue after forged grants = %q, want the waiter's entry %q still there", q, entry)
	}
	if st := e.state(holder); st != (semaphore.State{Limit: 1, Held: 1, Queued: 1}) {
		t.Errorf("state after forged grants = %s, want {Limit 1, Held 1, Queued 1}", stateString(st))
	}

	start := time.Now()
	mustRelease(t, holder, held)
	r := receive(t, ch, prompt, "waiter after the real release")
	t.Logf("the real hand-off reached the waiter %v after the release", r.at.Sub(start))
	mustRelease(t, waiter, r.ctx)
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestKilledWaiterSkipped queues a waiter in another process, then one here
// behind it, and kills the other process (SIGKILL) while the lock is held:
// when the holder releases, the permit must not go to the dead waiter, whose
// place would otherwise last a watchdog timeout (30s): the release drops it
// (its grant reaches no subscriber) and hands the permit to the next waiter at
// once.
func TestKilledWaiterSkipped(t *testing.T) {
	e := newEnv(t)
	const name = "killed-waiter"
	holder := semaphore.NewLock(e.client(), name)
	held, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	proc := e.startWaiterProcess(name)
	waitFor(t, 15*time.Second, "the waiter process queued", func() bool { return e.queueLen(name) == 1 })
	dead := e.queue(name)[0]
	deadID, _, _ := strings.Cut(dead, "/")
	deadClient := deadID[:strings.LastIndex(deadID, ":")]

	next := semaphore.NewLock(e.client(), name)
	ch := make(chan acquired, 1)
	go func() {
		lockCtx, err := next.Lock(e.ctx)
		ch <- acquired{ctx: lockCtx, err: err, at: time.Now()}
	}()
	waitFor(t, 5*time.Second, "the second waiter queued", func() bool { return e.queueLen(name) == 2 })
	if q := e.queue(name); q[0] != dead {
		t.Fatalf("queue = %q, want the waiter process's entry first", q)
	}

	if err := proc.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_ = proc.Wait()
	// Redis notices the closed connections of the dead process.
	grant := core.GrantChannel(e.base(name), deadClient)
	waitFor(t, 5*time.Second, "Redis to drop the dead process's subscription", func() bool { return e.numSub(grant) == 0 })

	start := time.Now()
	if err := holder.Unlock(held); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	r := receive(t, ch, prompt, "waiter behind the killed one")
	t.Logf("the waiter behind the killed one got the lock %v after the release", r.at.Sub(start))
	if q := e.queue(name); len(q) != 0 {
		t.Errorf("queue after the hand-off = %q, want empty (the dead waiter dropped)", q)
	}
	if l := e.leases(name); slices.Contains(l, deadID) {
		t.Errorf("the dead waiter holds a lease: %q", l)
	}
	if err := next.Unlock(r.ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestLostGrantCostsAtMostALease loses the grant message on its way to the
// waiter (the proxy in front of its Client drops pub/sub messages): the permit
// is the waiter's in Redis from the release on, and the waiter learns it when
// it re-checks, by the end of the holder's lease as its last check saw it.
func TestLostGrantCostsAtMostALease(t *testing.T) {
	e := newEnv(t)
	const (
		name  = "lost-grant"
		lease = 800 * time.Millisecond
	)
	holder := e.sem(e.client(), name, 1)
	pc, proxy := e.proxied()
	waiter := e.sem(pc, name, 1)
	acquiredAt := time.Now()
	held := mustAcquire(t, holder, e.ctx, 1, semaphore.WithLease(lease))
	ch := goAcquire(waiter, e.ctx, 1)
	waitFor(t, 5*time.Second, "the waiter queued", func() bool { return e.queueLen(name) == 1 })
	id, _, _ := strings.Cut(e.queue(name)[0], "/")

	proxy.DropMessages(true)
	start := time.Now()
	mustRelease(t, holder, held)
	if l := e.leases(name); !slices.Equal(l, []string{id}) {
		t.Errorf("leases right after the release = %q, want the permit granted to the waiter %s", l, id)
	}
	r := receive(t, ch, lease+prompt, "waiter whose grant was lost")
	t.Logf("the waiter learnt of its grant %v after the release (%v after the holder's %v lease began); %d message(s) dropped",
		r.at.Sub(start), r.at.Sub(acquiredAt), lease, proxy.Dropped())
	if proxy.Dropped() == 0 {
		t.Errorf("no message was dropped: the test did not lose the grant")
	}
	proxy.DropMessages(false)
	if n := waiter.Permits(r.ctx); n != 1 {
		t.Errorf("Permits = %d, want 1", n)
	}
	mustRelease(t, waiter, r.ctx)
	if n := e.available(holder); n != 1 {
		t.Errorf("Available at the end = %d, want 1", n)
	}
}

// TestOneMessagePerHandOffInSteadyState: workers taking turns through Redis
// (one goroutine in each of 4 Clients, linger 0: no lease is kept or passed
// within a Client, so every hand-off goes from one Client to another) queue
// behind permits granted for a claim window, so no waiter plans a re-check
// beyond the window and no hand-off needs the notice to the waiter left at the
// head (see rlock.WithClaimWindow): once the first holders' long leases are out
// of the queue, every hand-off costs one delivered message, whatever the
// number of Clients, with one permit or several.
func TestOneMessagePerHandOffInSteadyState(t *testing.T) {
	for _, limit := range []int64{1, 2} {
		t.Run("limit "+itoa(limit), func(t *testing.T) {
			e := newEnv(t)
			const workers = 4
			name := "steady-" + itoa(limit)
			var clients []*rlock.Client
			var sems []*semaphore.Semaphore
			for range workers {
				c := e.client(rlock.WithLinger(0))
				clients = append(clients, c)
				// WithLimit(1) is a one-permit semaphore with turns, as NewLock
				// makes; linger 0 keeps every hand-off in Redis.
				sems = append(sems, semaphore.New(c, name, semaphore.WithLimit(limit)))
			}
			// Scripts loaded and connections dialled before the count.
			for _, s := range sems {
				mustRelease(t, s, mustAcquire(t, s, e.ctx, 1))
			}
			received := func() (n int64) {
				for _, c := range clients {
					n += c.PubSubStats().Messages
				}
				return n
			}
			var acquisitions atomic.Int64
			warm := time.Now().Add(500 * time.Millisecond)
			stop := warm.Add(time.Second)
			type snap struct{ acq, msg int64 }
			at := make(chan snap, 1)
			var once sync.Once
			var wg sync.WaitGroup
			for _, s := range sems {
				wg.Go(func() {
					for time.Now().Before(stop) {
						permitCtx, err := s.Acquire(e.ctx, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if time.Now().After(warm) {
							once.Do(func() { at <- snap{acquisitions.Load(), received()} })
						}
						acquisitions.Add(1)
						time.Sleep(200 * time.Microsecond) // the critical section
						if err := s.Release(permitCtx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			s := <-at
			acq, msg := acquisitions.Load()-s.acq, received()-s.msg
			t.Logf("after warm-up: %d acquisitions, %d messages delivered (%.2f per acquisition)", acq, msg, float64(msg)/float64(acq))
			if acq < 50 {
				t.Fatalf("only %d acquisitions in a second", acq)
			}
			if msg > acq+workers {
				t.Fatalf("%d messages for %d acquisitions: hand-offs cost more than one message each", msg, acq)
			}
		})
	}
}
