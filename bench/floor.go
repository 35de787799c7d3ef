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
	Script bool    `json:"script,omitempty"`
	Sent   int     `json:"sent"`
	Lost   int     `json:"lost"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
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

// publishScript publishes ARGV[1] on KEYS[1]: the least a script that hands
// a lock on by pub/sub does.
var publishScript = rueidis.NewLuaScript("return redis.call('PUBLISH', KEYS[1], ARGV[1])")

// pubsubFloor runs the probe once: n messages from this process to a worker,
// by PUBLISH or, with script, by publishScript.
func (b *bench) pubsubFloor(ctx context.Context, round, n int, turn, script bool) (PubSubFloor, error) {
	out := PubSubFloor{Round: round, Sent: n, Turn: turn, Script: script}
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
	if script {
		// Loaded (EVALSHA, then EVAL once) on a channel no one hears.
		if err := publishScript.Exec(ctx, pub, []string{channel + ":load"}, []string{"0"}).Error(); err != nil {
			return fail(fmt.Errorf("script: %w", err))
		}
		publish = func(msg string) error {
			return publishScript.Exec(ctx, pub, []string{channel}, []string{msg}).Error()
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
			what := "PUBLISH"
			if script {
				what = "script PUBLISH"
			}
			return fail(fmt.Errorf("%s: %w", what, err))
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
