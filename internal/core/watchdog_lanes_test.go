package core

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/internal/redistest"
)

// twoNodes passes for a cluster client, so that the watchdog sends the
// renewals of each slot on a lane of its own (CLUSTER SLOTS fails on a
// standalone server, and a slot it does not know gets its own lane): the
// renewals of slot {hung} hang until their context ends, and those of slot
// {back} fail fast until backAt.
type twoNodes struct {
	rueidis.Client
	backAt time.Time
}

func (z *twoNodes) Mode() rueidis.ClientMode { return rueidis.ClientModeCluster }

func (z *twoNodes) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	fail := func(err error) []rueidis.RedisResult {
		rs := make([]rueidis.RedisResult, len(multi))
		for i := range rs {
			rs[i] = rueidis.NewErrorResult(err)
		}
		return rs
	}
	args := strings.Join(multi[0].Commands(), " ")
	switch {
	case strings.Contains(args, "{hung}"):
		<-ctx.Done()
		return fail(ctx.Err())
	case strings.Contains(args, "{back}") && time.Now().Before(z.backAt):
		return fail(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	}
	return z.Client.DoMulti(ctx, multi...)
}

// A node that does not answer holds up no other node's renewal retries: a
// hold on a node that failed fast (failing over) and comes back 0.8s before
// the lease runs out is renewed there within the period, while the
// renewals of another node hang for the whole round. (Its failures were
// reported only once every node's renewals ended, two periods later: no try
// was made, and the hold was lost.)
func TestRenewRetriesNotHeldUpByAHungNode(t *testing.T) {
	srv := redistest.New(t)
	raw := redistest.Client(t, srv)
	const lease = 3 * time.Second
	start := time.Now()
	z := &twoNodes{Client: redistest.Client(t, srv), backAt: start.Add(2200 * time.Millisecond)}
	c, err := NewClient(z, Config{WatchdogTimeout: lease, UnlockTimeout: 5 * time.Second, NoExpiryPoll: time.Second, KeyPrefix: "lanes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kind := &Kind{Name: "lanes", Script: lua.Renew, Args: func(holds []*Hold, lease time.Duration) ([]string, []string) {
		keys, args := []string{}, []string{strconv.FormatInt(lease.Milliseconds(), 10)}
		for _, h := range holds {
			keys, args = append(keys, h.Key()), append(args, h.Owner())
		}
		return keys, args
	}}
	prefix := redistest.KeyPrefix(t)
	ctx := context.Background()
	hold := func(key string) *Hold {
		t.Helper()
		if err := raw.Do(ctx, raw.B().Hset().Key(key).FieldValue().FieldValue("o", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		sent := c.NewTicket()
		if err := raw.Do(ctx, raw.B().Pexpire().Key(key).Milliseconds(lease.Milliseconds()).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		h := c.NewHold(HoldSpec{Kind: kind, Name: key, Key: key, Owner: "o", Lease: lease, Renew: true})
		c.Register(h)
		h.Start(sent)
		return h
	}
	back := hold(prefix + "{back}k")
	hold(prefix + "{hung}k")
	first := back.ValidUntil()
	for deadline := start.Add(lease + time.Second); ; {
		if ended, cause := back.State(); ended {
			t.Fatalf("the hold on the node that came back ended after %v (%v): not renewed there in time", time.Since(start).Round(time.Millisecond), cause)
		}
		if back.ValidUntil().After(first) {
			t.Logf("renewed on the node that came back %v after the start", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold on the node that came back was not renewed in %v", time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // polled, with its deadline
	}
}
