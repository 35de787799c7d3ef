package rlock_test

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

func newLateRenewClient(rc rueidis.Client, key string) *lateRenewClient {
	c := &lateRenewClient{Client: rc, key: key, ran: make(chan struct{})}
	c.armed.Store(true)
	return c
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

// A grantee whose claim extension ran in Redis but whose reply came past
// the claim window loses its hold when the window lapses, and gives the lock
// back: the waiter behind it gets the lock then, not when the extended lease
// (the watchdog's 30s) runs out in Redis.
func TestLateClaimExtensionGivesLockBack(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-late-extension"
	const claim = time.Second
	late := newLateRenewClient(redistest.Client(t, e.srv), e.lockKey(name))
	holder, grantee, next := e.client(), e.clientOn(late, rlock.WithClaimWindow(claim)), e.client()

	held := ftLock(t, e.ctx, holder.Mutex(name))
	grantCh := lockAsync(e.ctx, grantee.Mutex(name))
	e.queuedIs(1)
	nextCh := lockAsync(e.ctx, next.Mutex(name))
	e.queuedIs(2)
	mustUnlockFT(t, holder.Mutex(name), held)
	g := receiveLock(t, grantCh, ftPatience, "the grantee")

	select {
	case <-late.ran:
	case <-time.After(ftPatience):
		t.Fatal("the claim extension never ran")
	}
	if ttl, err := next.Mutex(name).TTL(e.ctx); err != nil || ttl <= claim {
		t.Fatalf("TTL after the extension ran = %v, %v; want the watchdog's lease", ttl, err)
	}
	select {
	case <-g.lc.Done():
	case <-time.After(ftPatience):
		t.Fatal("the grantee's hold did not end at the claim window")
	}
	ended := time.Now()
	if cause := context.Cause(g.lc); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("the grantee's lock context ended with %v, want ErrLeaseLost", cause)
	}
	r := receiveLock(t, nextCh, 2*time.Second, "the waiter behind the grantee")
	t.Logf("the waiter got the lock %v after the grantee's hold ended", r.at.Sub(ended).Round(time.Millisecond))
	mustUnlockFT(t, next.Mutex(name), r.lc)
}

// The same for the RWMutex, a writer or a reader granted the lock: the
// writer behind it gets the lock when the grantee's claim window lapses.
func TestRWLateClaimExtensionGivesLockBack(t *testing.T) {
	for _, write := range []bool{true, false} {
		t.Run(rwWord(write), func(t *testing.T) {
			e := ftNewEnv(t)
			name := "rw-claim-late-extension-" + rwWord(write)
			const claim = time.Second
			late := newLateRenewClient(redistest.Client(t, e.srv), e.lockKey(name))
			holder, grantee, next := e.client(), e.clientOn(late, rlock.WithClaimWindow(claim)), e.client()

			held := rwLock(t, e.ctx, holder.RWMutex(name), true)
			grantCh := rwLockAsync(e.ctx, grantee.RWMutex(name), write)
			e.rwQueuedIs(name, 1)
			nextCh := rwLockAsync(e.ctx, next.RWMutex(name), true)
			e.rwQueuedIs(name, 2)
			rwUnlock(t, holder.RWMutex(name), held, true)
			g := receiveLock(t, grantCh, ftPatience, "the grantee")

			select {
			case <-late.ran:
			case <-time.After(ftPatience):
				t.Fatal("the claim extension never ran")
			}
			if ttl := e.rwTTL(name, write); ttl <= claim {
				t.Fatalf("TTL after the extension ran = %v; want the watchdog's lease", ttl)
			}
			select {
			case <-g.lc.Done():
			case <-time.After(ftPatience):
				t.Fatal("the grantee's hold did not end at the claim window")
			}
			ended := time.Now()
			if cause := context.Cause(g.lc); !errors.Is(cause, rlock.ErrLeaseLost) {
				t.Errorf("the grantee's lock context ended with %v, want ErrLeaseLost", cause)
			}
			r := receiveLock(t, nextCh, 2*time.Second, "the writer behind the grantee")
			t.Logf("the writer got the lock %v after the grantee's hold ended", r.at.Sub(ended).Round(time.Millisecond))
			rwUnlock(t, next.RWMutex(name), r.lc, true)
		})
	}
}
