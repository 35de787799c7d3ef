package rlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// renewWatchdog is the watchdog timeout of the tests below: renewals every
// 300ms.
const renewWatchdog = 900 * time.Millisecond

// rwReadLeft is how long the one read lease of RWMutex name has left, by the
// server clock.
func (e *ftEnv) rwReadLeft(name string) time.Duration {
	e.t.Helper()
	zs, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.rwKey(name, ":r")).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil || len(zs) != 1 {
		e.t.Fatalf("readers of %s: %v, %v", name, zs, err)
	}
	tm, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return time.Duration(int64(zs[0].Score)-(s*1000+us/1000)) * time.Millisecond
}

// pttl is the PTTL of key.
func (e *ftEnv) pttl(key string) time.Duration {
	e.t.Helper()
	ms, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// replace deletes key and writes a string of someone else's in its place,
// for a minute.
func (e *ftEnv) replace(key string) {
	e.t.Helper()
	for _, cmd := range [][]string{{"DEL", key}, {"SET", key, "not-ours", "PX", "60000"}} {
		if _, err := e.srv.Do(e.ctx, cmd...); err != nil {
			e.t.Fatal(err)
		}
	}
}

// replaced checks that key is still the string replace wrote.
func (e *ftEnv) replaced(key string) {
	e.t.Helper()
	typ, err := e.raw.Do(e.ctx, e.raw.B().Type().Key(key).Build()).ToString()
	if pttl := e.pttl(key); err != nil || typ != "string" || pttl < 50*time.Second {
		e.t.Errorf("the wrong-typed key %s was changed: type %q (%v), PTTL %v", key, typ, err, pttl)
	}
}

// survives fails the test if the hold ctx of an intact lock ends within a
// third of the watchdog timeout: called as the hold whose lock someone broke
// lapsed, when the intact hold would lapse too were its renewals failing
// with that hold's.
func survives(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("the hold of an intact lock was lost with the other: %v", context.Cause(ctx))
	case <-time.After(renewWatchdog / 3):
	}
}

// lapses waits for the hold ctx, whose lock someone broke, to end with
// ErrLeaseLost.
func lapses(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * renewWatchdog):
		t.Fatal("the hold whose lock someone broke was never given up")
	}
	if !errors.Is(context.Cause(ctx), rlock.ErrLeaseLost) {
		t.Errorf("the hold ended with %v, want ErrLeaseLost", context.Cause(ctx))
	}
}

// The watchdog renews every Mutex hold of a Client in one script call; a
// lock whose hash someone replaced with a string fails the renewal of its
// own hold alone, and the hold of another lock renewed in the same call is
// kept. (The call failed as a whole: every hold of the Client was lost.)
func TestRenewBesideAWrongTypedLock(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(renewWatchdog))
	victim := ftLock(t, e.ctx, c.Mutex("renew-victim"))
	intact := ftLock(t, e.ctx, c.Mutex("renew-intact"))
	e.replace(e.lockKey("renew-victim"))
	lapses(t, victim)
	survives(t, intact)
	if left := e.pttl(e.lockKey("renew-intact")); left < renewWatchdog/3 {
		t.Errorf("the intact hold is not renewed: PTTL %v", left)
	}
	e.replaced(e.lockKey("renew-victim"))
	mustUnlockFT(t, c.Mutex("renew-intact"), intact)
}

// The same for read holds of RWMutexes: one whose reader counts hash
// someone replaced fails alone, the other is kept.
func TestRWReadRenewBesideAWrongTypedLock(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(renewWatchdog))
	victim, err := c.RWMutex("renew-victim").RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	intact, err := c.RWMutex("renew-intact").RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts := e.rwKey("renew-victim", ":r:n")
	e.replace(counts)
	lapses(t, victim)
	survives(t, intact)
	if left := e.rwReadLeft("renew-intact"); left < renewWatchdog/3 {
		t.Errorf("the intact read hold is not renewed: %v of its lease left", left)
	}
	e.replaced(counts)
	if err := c.RWMutex("renew-intact").RUnlock(intact); err != nil {
		t.Error(err)
	}
}

// Over maxmemory with noeviction, read holds are renewed as Mutex holds are:
// the renewal's first write is one Redis runs then (PEXPIREAT), after which
// it lets the ZADD go. (The ZADD came first, Redis refused every renewal, and
// the read hold was lost after one watchdog timeout.)
func TestRWReadRenewOverMaxmemory(t *testing.T) {
	e := ftNewEnv(t)
	c := e.client(rlock.WithWatchdogTimeout(renewWatchdog))
	r, err := c.RWMutex("renew-oom").RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if _, err := e.srv.Do(e.ctx, append([]string{"CONFIG", "SET"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = e.srv.Do(context.Background(), "CONFIG", "SET", "maxmemory", "0") })
	if err := e.raw.Do(e.ctx, e.raw.B().Set().Key(e.prefix+":probe").Value("x").Build()).Error(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("not over maxmemory: SET answered %v", err)
	}
	select {
	case <-r.Done():
		t.Fatalf("the read hold was lost over maxmemory: %v", context.Cause(r))
	case <-time.After(3 * renewWatchdog):
	}
	if left := e.rwReadLeft("renew-oom"); left < renewWatchdog/3 {
		t.Errorf("the read hold is not renewed over maxmemory: %v of its lease left", left)
	}
	if _, err := e.srv.Do(e.ctx, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := c.RWMutex("renew-oom").RUnlock(r); err != nil {
		t.Error(err)
	}
}
