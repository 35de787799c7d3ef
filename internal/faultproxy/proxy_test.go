package faultproxy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
)

func setup(t *testing.T) (*redistest.Server, *faultproxy.Proxy, rueidis.Client, context.Context) {
	t.Helper()
	srv := redistest.Owned(t)
	p, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return srv, p, c, ctx
}

func TestForwardsAndLatency(t *testing.T) {
	t.Parallel()
	_, p, c, ctx := setup(t)
	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error())
	p.SetLatency(50 * time.Millisecond)
	start := time.Now()
	v, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "latency both ways")
	p.SetLatency(0)
}

func TestStallAndResume(t *testing.T) {
	t.Parallel()
	_, p, c, ctx := setup(t)
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
	p.Stall()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.Do(short, c.B().Ping().Build()).Error()
	cancel()
	require.Error(t, err, "a stalled proxy answers nothing")
	p.Resume()
	deadline := time.Now().Add(15 * time.Second)
	for c.Do(ctx, c.B().Ping().Build()).Error() != nil {
		require.True(t, time.Now().Before(deadline), "no recovery after Resume")
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func TestCutAndBlock(t *testing.T) {
	t.Parallel()
	_, p, c, ctx := setup(t)
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
	p.Block(true)
	assert.GreaterOrEqual(t, p.Cut(), 1)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := c.Do(short, c.B().Ping().Build()).Error()
	cancel()
	require.Error(t, err, "blocked proxy refuses connections")
	p.Block(false)
	deadline := time.Now().Add(15 * time.Second)
	for c.Do(ctx, c.B().Ping().Build()).Error() != nil {
		require.True(t, time.Now().Before(deadline), "no recovery after unblock")
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func TestDropMessages(t *testing.T) {
	t.Parallel()
	srv, p, c, ctx := setup(t)
	var mu sync.Mutex
	var got []string
	subCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Receive(subCtx, c.B().Subscribe().Channel("ch").Build(), func(m rueidis.PubSubMessage) {
			mu.Lock()
			got = append(got, m.Message)
			mu.Unlock()
		})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := srv.NumSub(ctx, "ch")
		if err == nil && n["ch"] == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "not subscribed")
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	received := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
	p.DropMessages(true)
	_, err := srv.Do(ctx, "PUBLISH", "ch", "lost")
	require.NoError(t, err)
	for p.Dropped() == 0 {
		require.True(t, time.Now().Before(deadline), "message not dropped")
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	assert.Equal(t, int64(1), p.Dropped())
	p.DropMessages(false)
	_, err = srv.Do(ctx, "PUBLISH", "ch", "kept")
	require.NoError(t, err)
	for len(received()) == 0 {
		require.True(t, time.Now().Before(deadline), "message not delivered")
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	assert.Equal(t, []string{"kept"}, received())
	cancel()
	<-done
}

func TestRefusesNonLoopback(t *testing.T) {
	_, err := faultproxy.Start("10.1.2.3:6380")
	require.Error(t, err)
}

// TestLoseReply sends a SET whose reply the proxy loses: the caller gets a
// connection error, yet the key is set in Redis. Commands that do not match,
// and subscribed connections, are left alone.
func TestLoseReply(t *testing.T) {
	t.Parallel()
	srv, p, c, ctx := setup(t)
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
	isSet := func(args []string) bool { return len(args) > 1 && args[0] == "SET" && args[1] == "lost" }
	done := p.LoseReply(isSet)

	// Not a match: answered as usual.
	require.NoError(t, c.Do(ctx, c.B().Set().Key("kept").Value("1").Build()).Error())
	select {
	case <-done:
		t.Fatal("a loss taken by a command that does not match")
	default:
	}

	err := c.Do(ctx, c.B().Set().Key("lost").Value("v").Build()).Error()
	require.Error(t, err, "the reply of the SET must not reach the client")
	_, isRedis := rueidis.IsRedisErr(err)
	assert.False(t, isRedis, "a connection error, not a Redis reply: %v", err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the loss was not reported")
	}
	assert.Equal(t, int64(1), p.LostReplies())

	// The command ran in Redis.
	v, err := srv.Do(ctx, "GET", "lost")
	require.NoError(t, err)
	s, err := v.ToString()
	require.NoError(t, err)
	assert.Equal(t, "v", s)

	// The client reconnects; nothing else is lost.
	deadline := time.Now().Add(15 * time.Second)
	for c.Do(ctx, c.B().Ping().Build()).Error() != nil {
		require.True(t, time.Now().Before(deadline), "no recovery after the lost reply")
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	require.NoError(t, c.Do(ctx, c.B().Set().Key("after").Value("1").Build()).Error())
	assert.Equal(t, 0, p.CancelLosses())
}

// TestLoseReplySkipsSubscribers arms a loss that matches everything while a
// client is subscribed: the subscription's connection is not the one cut, and
// a disarmed loss never happens.
func TestLoseReplySkipsSubscribers(t *testing.T) {
	t.Parallel()
	srv, p, c, ctx := setup(t)
	// A connection of its own for the subscription, as pubsub.Multiplexer
	// does (rueidis would otherwise subscribe on the command connection).
	dc, release := c.Dedicate()
	defer release()
	subCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- dc.Receive(subCtx, dc.B().Subscribe().Channel("ch").Build(), func(rueidis.PubSubMessage) {})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := srv.NumSub(ctx, "ch")
		if err == nil && n["ch"] == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "not subscribed")
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	// Armed while only the subscribed connection is busy: the next command
	// on a command connection takes it.
	lost := p.LoseReply(func(args []string) bool { return args[0] == "INCR" })
	require.Error(t, c.Do(ctx, c.B().Incr().Key("n").Build()).Error())
	<-lost
	v, err := srv.Do(ctx, "GET", "n")
	require.NoError(t, err)
	n, err := v.AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the INCR ran once")
	nsub, err := srv.NumSub(ctx, "ch")
	require.NoError(t, err)
	assert.Equal(t, int64(1), nsub["ch"], "the subscription was not cut")

	p.LoseReply(nil)
	assert.Equal(t, 1, p.CancelLosses())
	for c.Do(ctx, c.B().Ping().Build()).Error() != nil {
		require.True(t, time.Now().Before(deadline), "no recovery after the lost reply")
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	assert.Equal(t, int64(1), p.LostReplies())
	cancel()
	<-done
}
