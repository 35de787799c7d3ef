package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
)

// The pub/sub floor: how long bare rueidis pub/sub takes to deliver a
// message from one process to another after the same idle pattern as a lock
// hand-off between processes. The subscriber, in a worker process, holds a
// dedicated connection with a SUBSCRIBE on one channel, as rlock's pub/sub
// multiplexer does; the publisher, in the bench process, sleeps 10-20ms
// (uniformly at random, like the holds of the handoff-xproc point), then
// PUBLISHes a sequence number. The latency is the PUBLISH call's start to
// the subscriber's receipt, both CLOCK_MONOTONIC.

// Floor probe idle between messages: like the holds of the handoff-xproc
// point, and, for the turn floor, like the gap between two cross-process
// hand-offs when a Client keeps the lock for a turn of about 8 such holds
// (rlock's turns): the longer a connection idles, the slower its first
// message is woken up on a loaded machine.
const (
	floorIdleMin     = 10 * time.Millisecond
	floorIdleMax     = 20 * time.Millisecond
	turnFloorIdleMin = 100 * time.Millisecond
	turnFloorIdleMax = 200 * time.Millisecond
)

// PubSubFloor is one round's probe, in milliseconds.
type PubSubFloor struct {
	Round int  `json:"round"`
	Turn  bool `json:"turn_idle,omitempty"` // measured after turnFloorIdle* rather than floorIdle*
	// Script: published by a one-line Lua script (EVALSHA of
	// publishScript) rather than by PUBLISH: the floor under any hand-off
	// that a script makes.
	Script bool `json:"script,omitempty"`
	// Handoff: published by handoffScript, the least a hand-off that keeps
	// a lock safe does (see there): the floor under any such hand-off.
	Handoff bool    `json:"handoff,omitempty"`
	Sent    int     `json:"sent"`
	Lost    int     `json:"lost"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
	// The PUBLISH calls' own round trips (call to reply, in the publisher),
	// for comparison with the delivery.
	PublishP50 float64 `json:"publish_rtt_p50_ms"`
	PublishP99 float64 `json:"publish_rtt_p99_ms"`
}

// subscriber is the worker side of the probe.
type subscriber struct {
	job    Job
	rc     rueidis.Client
	dc     rueidis.DedicatedClient
	cancel func()

	mu       sync.Mutex
	receipts [][2]int64
	all      chan struct{} // closed once every message came
}

func openSubscriber(ctx context.Context, job Job) (*subscriber, error) {
	// The same client set-up as the contenders' (newRueidis), uncounted.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{job.Addr}, ForceSingleClient: true})
	if err != nil {
		return nil, err
	}
	s := &subscriber{job: job, rc: rc, all: make(chan struct{})}
	s.dc, s.cancel = rc.Dedicate()
	s.dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: s.onMessage})
	// SUBSCRIBE returns once Redis confirmed it: the worker is ready then.
	if err := s.dc.Do(ctx, s.dc.B().Subscribe().Channel(job.Channel).Build()).Error(); err != nil {
		s.close()
		return nil, fmt.Errorf("SUBSCRIBE: %w", err)
	}
	return s, nil
}

// onMessage runs on rueidis's reading goroutine, like the multiplexer's.
func (s *subscriber) onMessage(m rueidis.PubSubMessage) {
	t := mono()
	seq, err := strconv.ParseInt(m.Message, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.receipts = append(s.receipts, [2]int64{seq, t})
	if len(s.receipts) == s.job.Messages {
		close(s.all)
	}
}

// run waits for every message, or for as long as they could take.
func (s *subscriber) run() WorkerResult {
	res := WorkerResult{Worker: s.job.Worker, Start: mono()}
	select {
	case <-s.all:
	case <-time.After(time.Duration(s.job.Messages)*(floorIdleMax+5*time.Millisecond) + 10*time.Second):
	}
	res.End = mono()
	s.mu.Lock()
	res.Receipts = slices.Clone(s.receipts)
	s.mu.Unlock()
	return res
}

func (s *subscriber) close() {
	s.cancel()
	s.rc.Close()
}

// floorBy is what publishes the probe's messages.
type floorBy int

const (
	byPublish floorBy = iota // PUBLISH
	byScript                 // publishScript
	byHandoff                // handoffScript
)

func (by floorBy) String() string {
	return [...]string{"PUBLISH", "script PUBLISH", "hand-off script"}[by]
}

// publishScript publishes ARGV[1] on KEYS[1]: the least a script that hands
// a lock on by pub/sub does.
var publishScript = rueidis.NewLuaScript("return redis.call('PUBLISH', KEYS[1], ARGV[1])")

// handoffScript is the least a hand-off does that keeps a lock safe when
// replies can be lost and anyone may publish: it checks that the releasing
// owner holds the lock, takes the head of the queue, makes the lock its
// (with a lease, so that a dead holder cannot keep it), draws a fencing
// token, and tells it. rlock's release does this and more (a reentrant
// count, waiters' deadlines, the claim window, the idempotency latch, the
// releasing Client's next place in the queue), so no hand-off of rlock's
// can be quicker than this one.
//
// KEYS[1] lock hash, KEYS[2] queue zset (member -> arrival), KEYS[3] fencing
// counter; ARGV[1] releasing owner, ARGV[2] the message, ARGV[3] lease (ms),
// ARGV[4] the head's channel (not a key: it need not share the keys' slot).
// Returns the receivers, or -1 when ARGV[1] does not hold the lock, -2 when
// no one is queued.
var handoffScript = rueidis.NewLuaScript(`
if not redis.call('HGET', KEYS[1], ARGV[1]) then
  return -1
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then
  return -2
end
redis.call('ZREM', KEYS[2], head)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], head, 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('INCR', KEYS[3])
return redis.call('PUBLISH', ARGV[4], ARGV[2])
`)

// handoffOwner is the owner the probe's nth hand-off releases (n = -1: the
// first holder); the n+1th is queued behind it.
func handoffOwner(n int) string { return "w" + strconv.Itoa(n+1) }

// pubsubFloor runs the probe once: n messages from this process to a worker,
// published as by says.
func (b *bench) pubsubFloor(ctx context.Context, round, n int, turn bool, by floorBy) (PubSubFloor, error) {
	out := PubSubFloor{Round: round, Sent: n, Turn: turn, Script: by == byScript, Handoff: by == byHandoff}
	idleMin, idleMax := floorIdleMin, floorIdleMax
	if turn {
		idleMin, idleMax = turnFloorIdleMin, turnFloorIdleMax
	}
	ws, err := b.pool.get(1)
	if err != nil {
		return out, err
	}
	fail := func(err error) (PubSubFloor, error) {
		b.pool.discard(ws)
		return out, fmt.Errorf("pub/sub floor: %w", err)
	}
	b.seq++
	channel := fmt.Sprintf("%s:%d:floor", b.prefix, b.seq)
	w := ws[0]
	if err := w.send(toWorker{Cmd: "job", Job: &Job{Mode: "subscribe", Addr: b.addr, Channel: channel, Messages: n}}); err != nil {
		return fail(err)
	}
	if err := recvAll(ctx, ws, "ready", time.Minute); err != nil {
		return fail(err)
	}
	pub, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{b.addr}, ForceSingleClient: true})
	if err != nil {
		return fail(err)
	}
	defer pub.Close()
	if err := pub.Do(ctx, pub.B().Ping().Build()).Error(); err != nil { // connected before the first message
		return fail(err)
	}
	publish := func(msg string) error {
		return pub.Do(ctx, pub.B().Publish().Channel(channel).Message(msg).Build()).Error()
	}
	switch by {
	case byScript:
		// Loaded (EVALSHA, then EVAL once) on a channel no one hears.
		if err := publishScript.Exec(ctx, pub, []string{channel + ":load"}, []string{"0"}).Error(); err != nil {
			return fail(fmt.Errorf("script: %w", err))
		}
		publish = func(msg string) error {
			return publishScript.Exec(ctx, pub, []string{channel}, []string{msg}).Error()
		}
	case byHandoff:
		// A lock held by the first owner with every later one queued in
		// order, so that each message is one hand-off with nothing to set
		// up between them (which would wake the server before the idle
		// ends). The script is loaded on a queue of its own.
		tag := fmt.Sprintf("%s:{%d:handoff}", b.prefix, b.seq)
		keys := []string{tag + ":lock", tag + ":queue", tag + ":fence"}
		cmds := rueidis.Commands{
			pub.B().Hset().Key(keys[0]).FieldValue().FieldValue(handoffOwner(-1), "1").Build(),
			pub.B().Pexpire().Key(keys[0]).Milliseconds(time.Hour.Milliseconds()).Build(),
		}
		queue := pub.B().Zadd().Key(keys[1]).ScoreMember()
		for i := range n {
			queue = queue.ScoreMember(float64(i), handoffOwner(i))
		}
		cmds = append(cmds, queue.Build(), pub.B().Pexpire().Key(keys[1]).Milliseconds(time.Hour.Milliseconds()).Build(),
			pub.B().Set().Key(keys[2]).Value("0").PxMilliseconds(time.Hour.Milliseconds()).Build())
		defer func() {
			// Keys of the probe only: gone with it (they expire anyway).
			pub.Do(context.WithoutCancel(ctx), pub.B().Del().Key(keys...).Build())
		}()
		for _, r := range pub.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fail(fmt.Errorf("hand-off script set-up: %w", err))
			}
		}
		load := []string{tag + ":load:lock", tag + ":load:queue", keys[2]}
		if err := handoffScript.Exec(ctx, pub, load, []string{"-", "0", "1", channel + ":load"}).Error(); err != nil {
			return fail(fmt.Errorf("hand-off script: %w", err))
		}
		lease := strconv.FormatInt(time.Hour.Milliseconds(), 10)
		handed := 0
		publish = func(msg string) error {
			heard, err := handoffScript.Exec(ctx, pub, keys, []string{handoffOwner(handed - 1), msg, lease, channel}).AsInt64()
			handed++
			if err == nil && heard < 0 {
				err = fmt.Errorf("the hand-off was refused (%d): the probe's lock is not as it left it", heard)
			}
			return err
		}
	}
	if err := w.send(toWorker{Cmd: "go"}); err != nil {
		return fail(err)
	}
	sent := make([]int64, n)
	rtts := make([]int64, n)
	for i := range n {
		time.Sleep(idleMin + rand.N(idleMax-idleMin))
		sent[i] = mono()
		if err := publish(strconv.Itoa(i)); err != nil {
			return fail(fmt.Errorf("%v: %w", by, err))
		}
		rtts[i] = mono() - sent[i]
	}
	slices.Sort(rtts)
	out.PublishP50, out.PublishP99 = ms(measure.Percentile(rtts, 0.5)), ms(measure.Percentile(rtts, 0.99))
	var res WorkerResult
	if err := recvEach(ctx, ws, "result", time.Minute, func(_ int, m fromWorker) { res = *m.Result }); err != nil {
		return fail(err)
	}
	if err := w.send(toWorker{Cmd: "close"}); err != nil {
		return fail(err)
	}
	if err := recvAll(ctx, ws, "closed", time.Minute); err != nil {
		return fail(err)
	}
	lat := make([]int64, 0, n)
	for _, r := range res.Receipts {
		if seq := r[0]; seq >= 0 && seq < int64(n) {
			lat = append(lat, r[1]-sent[seq])
		}
	}
	slices.Sort(lat)
	out.Lost = n - len(lat)
	out.P50, out.P99 = ms(measure.Percentile(lat, 0.5)), ms(measure.Percentile(lat, 0.99))
	if len(lat) > 0 {
		out.Max = ms(lat[len(lat)-1])
	}
	return out, nil
}
