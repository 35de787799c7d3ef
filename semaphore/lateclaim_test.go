package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// lateRenewClient runs every command, but, while armed, holds back the reply
// of every script call sent in a DoMulti (the watchdog's renewals and claim
// extensions) on a key that contains key, until the caller's context ends:
// the scripts ran in Redis, their replies came too late. Every one, not only
// the first: a retry of the extension answered in time would (rightly) keep
// the hold, and whether it comes before the hold's expiry timer fires is a
// matter of scheduling on a loaded machine.
type lateRenewClient struct {
	rueidis.Client
	key   string
	armed atomic.Bool
	ran   chan struct{} // closed once the first held-back script ran
	once  sync.Once
}

func (c *lateRenewClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	hold := false
	for _, cmd := range cmds {
		args := cmd.Commands()
		if len(args) > 3 && redistest.IsScript(args) && strings.Contains(strings.Join(args[3:], " "), c.key) {
			hold = true
		}
	}
	rs := c.Client.DoMulti(ctx, cmds...)
	if !hold || rs[0].Error() != nil || !c.armed.Load() {
		return rs
	}
	c.once.Do(func() { close(c.ran) })
	<-ctx.Done()
	for i := range rs {
		rs[i] = rueidis.NewErrorResult(ctx.Err())
	}
	return rs
}

// TestLateClaimExtensionGivesPermitsBack: a waiter whose claim extension ran
// in Redis but whose reply came past the claim window loses its permit when
// the window lapses and gives it back: the waiter behind it gets it then,
// not when the extended lease (the watchdog's 30s) runs out in Redis.
func TestLateClaimExtensionGivesPermitsBack(t *testing.T) {
	e := ownedEnv(t)
	const name = "claim-late-extension"
	const claim = time.Second
	late := &lateRenewClient{Client: redistest.Client(t, e.srv), key: e.base(name), ran: make(chan struct{})}
	late.armed.Store(true)
	lc, err := rlock.New(late, rlock.WithKeyPrefix(e.prefix), rlock.WithClaimWindow(claim))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	holder, grantee, next := e.sem(e.client(), name, 1), e.sem(lc, name, 1), e.sem(e.client(), name, 1)

	held := mustAcquire(t, holder, e.ctx, 1)
	grantCh := goAcquire(grantee, e.ctx, 1)
	waitFor(t, 5*time.Second, "the first waiter queued", func() bool { return e.queueLen(name) == 1 })
	nextCh := goAcquire(next, e.ctx, 1)
	waitFor(t, 5*time.Second, "the second waiter queued", func() bool { return e.queueLen(name) == 2 })
	mustRelease(t, holder, held)
	g := receive(t, grantCh, prompt, "the first waiter")

	select {
	case <-late.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim extension never ran")
	}
	select {
	case <-g.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first waiter's permit context did not end at the claim window")
	}
	ended := time.Now()
	if cause := context.Cause(g.ctx); !errors.Is(cause, semaphore.ErrLeaseLost) {
		t.Errorf("the first waiter's permit context ended with %v, want ErrLeaseLost", cause)
	}
	r := receive(t, nextCh, 2*time.Second, "the waiter behind")
	t.Logf("the waiter behind got the permit %v after the first one's hold ended", r.at.Sub(ended).Round(time.Millisecond))
	mustRelease(t, next, r.ctx)
}
