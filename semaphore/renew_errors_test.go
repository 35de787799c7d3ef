package semaphore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// renewWatchdog is the watchdog timeout of the tests below: renewals every
// 300ms.
const renewWatchdog = 900 * time.Millisecond

// serverMs is the server clock in milliseconds.
func (e *env) serverMs() int64 {
	e.t.Helper()
	tm, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

// leaseEnd is the end (server ms) of the one lease in semaphore name.
func (e *env) leaseEnd(name string) int64 {
	e.t.Helper()
	zs, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.base(name)+":permits").Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil || len(zs) != 1 {
		e.t.Fatalf("permits of %s: %v, %v", name, zs, err)
	}
	return int64(zs[0].Score)
}

// overMaxmemory puts the server over maxmemory with noeviction until the end
// of the test: Redis refuses every command that may add data.
func (e *env) overMaxmemory() {
	e.t.Helper()
	for _, args := range [][]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if _, err := e.srv.Do(e.ctx, append([]string{"CONFIG", "SET"}, args...)...); err != nil {
			e.t.Fatal(err)
		}
	}
	e.t.Cleanup(func() { _, _ = e.srv.Do(context.Background(), "CONFIG", "SET", "maxmemory", "0") })
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(e.prefix+":probe").Value("x").Build()).Error(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		e.t.Fatalf("not over maxmemory: SET answered %v", err)
	}
}

// The watchdog renews the permits of a Client in one script call; a
// semaphore whose state hash someone replaced with a string fails the
// renewal of its own permit alone, which lapses with its lease, and the
// permit of another semaphore renewed in the same call is kept. (The call
// failed as a whole, and every permit of the Client was lost.)
func TestRenewBesideAWrongTypedSemaphore(t *testing.T) {
	e := ownedEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(renewWatchdog))
	victim := semaphore.New(c, "renew-victim", semaphore.WithLimit(1))
	intact := semaphore.New(c, "renew-intact", semaphore.WithLimit(1))
	pv, err := victim.TryAcquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := intact.TryAcquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	state := e.base("renew-victim")
	for _, cmd := range [][]string{{"DEL", state}, {"SET", state, "not-ours", "PX", "60000"}} {
		if _, err := e.srv.Do(e.ctx, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-pv.Done():
	case <-time.After(5 * renewWatchdog):
		t.Fatal("the permit of the semaphore whose state someone replaced was never given up")
	}
	if !errors.Is(context.Cause(pv), semaphore.ErrLeaseLost) {
		t.Errorf("the permit ended with %v, want ErrLeaseLost", context.Cause(pv))
	}
	// Renewed in the same calls, the intact permit would be lapsing now too.
	select {
	case <-pi.Done():
		t.Fatalf("the permit of an intact semaphore was lost with the other: %v", context.Cause(pi))
	case <-time.After(renewWatchdog / 3):
	}
	if left := e.leaseEnd("renew-intact") - e.serverMs(); left < renewWatchdog.Milliseconds()/3 {
		t.Errorf("the intact permit is not renewed: %dms of its lease left", left)
	}
	typ, err := e.raw.Do(e.ctx, e.raw.B().Type().Key(state).Build()).ToString()
	pttl, _ := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(state).Build()).AsInt64()
	if err != nil || typ != "string" || pttl < 50000 {
		t.Errorf("the wrong-typed key was changed: type %q (%v), PTTL %dms", typ, err, pttl)
	}
	if err := intact.Release(pi); err != nil {
		t.Error(err)
	}
}

// Over maxmemory with noeviction, permits are renewed as Mutex holds are:
// the renewal's first write is one Redis runs then (PEXPIREAT), after which
// it lets the ZADD go. (The ZADD came first, Redis refused every renewal, and
// the permit was lost after one watchdog timeout.)
func TestRenewOverMaxmemoryKeepsPermit(t *testing.T) {
	e := ownedEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(renewWatchdog))
	s := semaphore.New(c, "renew-oom", semaphore.WithLimit(1))
	p, err := s.TryAcquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.overMaxmemory()
	select {
	case <-p.Done():
		t.Fatalf("the permit was lost over maxmemory: %v", context.Cause(p))
	case <-time.After(3 * renewWatchdog):
	}
	if left := e.leaseEnd("renew-oom") - e.serverMs(); left < renewWatchdog.Milliseconds()/3 {
		t.Errorf("the permit is not renewed over maxmemory: %dms of its lease left", left)
	}
	if _, err := e.srv.Do(e.ctx, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(p); err != nil {
		t.Error(err)
	}
}
