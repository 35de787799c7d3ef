package rlock_test

// Tests that a Client's view of a hold never outlives or outruns Redis: lost
// and reordered replies, failed releases, ForceUnlock seen by a cohort,
// forged hand-off messages, errors that say what happened (issue #9; the
// item numbers refer to it).

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// ftScript names the Mutex script a command runs, from its keys (EVALSHA sha
// numkeys key...), or "" for any other command.
func ftScript(args []string) string {
	if len(args) < 4 || !redistest.IsScript(args) {
		return ""
	}
	keys := args[3:]
	numKeys, _ := strconv.Atoi(args[2])
	argv := args[min(3+numKeys, len(args)):]
	switch {
	case len(keys) >= 2 && strings.HasSuffix(keys[1], ":fence") && len(argv) >= 3 && argv[2] == "1":
		return "reenter" // acquire.lua's ARGV[3]: re-entry
	case len(keys) >= 2 && strings.HasSuffix(keys[1], ":fence"):
		return "acquire"
	case len(keys) >= 2 && strings.Contains(keys[1], ":latch:"):
		return "release"
	case len(keys) >= 2 && strings.Contains(keys[1], ":gone:"):
		return "abandon"
	case numKeys >= 1 && len(argv) >= 4 && (argv[1] == "r" || argv[1] == "w") && argv[3] == "1" &&
		strings.Contains(keys[min(numKeys, len(keys))-1], ":latch:"):
		return "reenter" // rw_acquire.lua's ARGV[4]: re-entry, its latch the last key
	}
	return "other" // renew (one key per hold), forceunlock, the other RWMutex scripts...
}

// ftFault is what ftFaultClient does to one script call.
type ftFault struct {
	run   bool          // run the command in Redis
	lose  bool          // then report a connection error instead of its reply
	delay time.Duration // before returning (a slow network)
	hold  bool          // hand the call to the test and wait until it lets go
}

var (
	ftLoseReply = ftFault{run: true, lose: true}
	ftFailCall  = ftFault{lose: true}
	errFtLost   = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
)

// ftFaultClient runs commands through a real client, but lets a test decide,
// per script call, to lose its reply after Redis ran it, to fail it without
// running it, to delay its reply, or to hold its reply back.
type ftFaultClient struct {
	rueidis.Client
	mu    sync.Mutex
	fault func(script string) *ftFault
	held  chan chan struct{} // a held call sends its release channel here
}

func ftFaulty(t *testing.T, srv *redistest.Server) *ftFaultClient {
	return &ftFaultClient{Client: redistest.Client(t, srv), held: make(chan chan struct{})}
}

func (f *ftFaultClient) set(fn func(script string) *ftFault) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

// DoMulti (the watchdog's renewals) applies the faults to each command, sent
// one after another through Do.
func (f *ftFaultClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	results := make([]rueidis.RedisResult, len(multi))
	for i, cmd := range multi {
		results[i] = f.Do(ctx, cmd)
	}
	return results
}

func (f *ftFaultClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	script := ftScript(cmd.Commands())
	var fault *ftFault
	f.mu.Lock()
	if f.fault != nil && script != "" {
		fault = f.fault(script)
	}
	f.mu.Unlock()
	if fault == nil {
		return f.Client.Do(ctx, cmd)
	}
	r := rueidis.NewErrorResult(errFtLost)
	if fault.run {
		if got := f.Client.Do(ctx, cmd); !fault.lose {
			r = got
		}
	}
	if fault.hold {
		done := make(chan struct{})
		f.held <- done
		<-done
	}
	if fault.delay > 0 {
		time.Sleep(fault.delay) // the fault itself: a reply that comes late
	}
	return r
}

func ftLock(t *testing.T, ctx context.Context, m *rlock.Mutex, opts ...rlock.LockOption) context.Context {
	t.Helper()
	l, err := m.Lock(ctx, opts...)
	if err != nil {
		t.Fatalf("Lock %s: %v", m, err)
	}
	return l
}

// once returns a fault for the first call of script only.
func once(script string, fault ftFault) func(string) *ftFault {
	var done atomic.Bool
	return func(s string) *ftFault {
		if s == script && done.CompareAndSwap(false, true) {
			return &fault
		}
		return nil
	}
}

// Item 1: a release retried after a lost reply dates the lease it re-set
// from its first send, so the lock context never outlives the key.
func TestHoldRetriedReleaseDatedFromFirstSend(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	m := e.clientOn(fc).Mutex("retried")
	const lease = 400 * time.Millisecond
	l1 := ftLock(t, e.ctx, m, rlock.WithLease(lease))
	l2 := ftLock(t, l1, m, rlock.WithLease(lease))

	// The first release runs in Redis at once; its reply is lost 300ms
	// later, so the retry is sent that much after the command that re-set
	// the lease.
	fc.set(once("release", ftFault{run: true, lose: true, delay: 300 * time.Millisecond}))
	sent := time.Now()
	if err := m.Unlock(l2); err != nil {
		t.Fatalf("inner Unlock: %v", err)
	}
	<-l1.Done()
	// Redis re-set the lease just after sent, so the key lives until about
	// sent+lease; the lock context must not outlive it.
	if ended := time.Since(sent); ended > lease+100*time.Millisecond {
		t.Fatalf("lock context ended %v after the release was first sent, with a lease of %v: it outlived the key", ended, lease)
	}
	if !errors.Is(context.Cause(l1), rlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(l1))
	}
}

// Item 2: a watchdog renewal that ran before a WithLease re-entry but whose
// reply comes after it does not extend the hold past the re-entry's lease.
func TestHoldRenewalReplyAfterFixedLeaseReentry(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	const wd = 1500 * time.Millisecond
	m := e.clientOn(fc, rlock.WithWatchdogTimeout(wd)).Mutex("reordered")
	l1 := ftLock(t, e.ctx, m)
	fc.set(once("other", ftFault{run: true, hold: true})) // the next renewal
	done := <-fc.held                                     // it ran in Redis; its reply waits
	const lease = 300 * time.Millisecond
	sent := time.Now()
	l2 := ftLock(t, l1, m, rlock.WithLease(lease))
	close(done) // now the renewal's reply arrives, after the re-entry's
	<-l2.Done()
	if ended := time.Since(sent); ended > lease+200*time.Millisecond {
		t.Fatalf("hold ended %v after a re-entry with a lease of %v: an older renewal extended it", ended, lease)
	}
	if !errors.Is(context.Cause(l2), rlock.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(l2))
	}
}

// ftCohort makes goroutines of Client a queue for name behind a holder in
// Client b, so that the first of them gets the lock through the Redis queue
// (with spare tokens and a listener) while the second waits in a's cohort.
// It returns the first's lock context and the second's pending result.
func ftCohort(t *testing.T, e *ftEnv, a, b *rlock.Client, name string) (context.Context, <-chan ftResult) {
	t.Helper()
	lb := ftLock(t, e.ctx, b.Mutex(name))
	first := make(chan ftResult, 1)
	go func() {
		l, err := a.Mutex(name).Lock(e.ctx)
		first <- ftResult{l, err}
	}()
	e.queuedIs(1)
	second := make(chan ftResult, 1)
	go func() {
		l, err := a.Mutex(name).Lock(e.ctx)
		second <- ftResult{l, err}
	}()
	e.eventually(ftPatience, "a second local waiter", func() bool { return rlock.WaitingInClient(a, name) == 2 })
	mustUnlockFT(t, b.Mutex(name), lb)
	r := <-first
	if r.err != nil {
		t.Fatalf("first local waiter: %v", r.err)
	}
	e.eventually(ftPatience, "a cohort holding the lock", func() bool { return rlock.CohortHeld(a, name) })
	return r.ctx, second
}

type ftResult struct {
	ctx context.Context
	err error
}

// Item 3: after ForceUnlock, a Client whose goroutine held the lock does not
// pass it to its next goroutine beside the new holder; its Unlock reports
// ErrNotHeld, and the next goroutine gets a token above the new holder's.
func TestHoldCohortHearsForceUnlock(t *testing.T) {
	e := ftNewEnv(t)
	a, b, admin := e.client(), e.client(), e.client()
	const name = "forced"
	l1, second := ftCohort(t, e, a, b, name)
	if ok, err := admin.Mutex(name).ForceUnlock(e.ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	e.eventually(ftPatience, "the holding Client to hear ForceUnlock", func() bool { return rlock.WatchSignalled(a, name) })
	mb := b.Mutex(name)
	lb := ftLock(t, e.ctx, mb)
	tokB, _ := mb.Token(lb)
	if err := a.Mutex(name).Unlock(l1); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Unlock of a force-unlocked hold: %v, want ErrNotHeld", err)
	}
	select {
	case r := <-second:
		t.Fatalf("the next local goroutine got the lock beside its new holder (err %v)", r.err)
	default:
	}
	mustUnlockFT(t, mb, lb)
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	if tok, _ := a.Mutex(name).Token(r.ctx); tok <= tokB {
		t.Fatalf("token %d after the new holder's %d: tokens must rise", tok, tokB)
	}
	mustUnlockFT(t, a.Mutex(name), r.ctx)
}

// Item 4: a hand-off message published by anyone who can publish on the
// waiter's grant channel, naming the queued owner, grants nothing.
func TestHoldForgedHandOffGrantsNothing(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(), e.client()
	const name = "forged"
	lb := ftLock(t, e.ctx, b.Mutex(name))
	got := make(chan ftResult, 1)
	go func() {
		l, err := a.Mutex(name).Lock(e.ctx)
		got <- ftResult{l, err}
	}()
	e.queuedIs(1)
	entries := e.sortedSetMembers()
	var owner string
	for _, km := range entries { // "key member"; a member is owner/lease/...
		_, m, _ := strings.Cut(km, " ")
		if i := strings.Index(m, "/"); i > 0 && strings.HasPrefix(m, a.ID()) {
			owner = m[:i]
		}
	}
	if owner == "" {
		t.Fatalf("no queue entry of the waiter in %v", entries)
	}
	before := e.scripts()
	for _, data := range []string{"18446744073709551615:18446744073709551615:0", "99999999999999999:99999999999999999:0:" + strings.Repeat("ab", 20), "1:1:0:0"} {
		if _, err := e.srv.Do(e.ctx, "PUBLISH", e.lockKey(name)+":to:"+a.ID(), "@"+owner+" "+data); err != nil {
			t.Fatal(err)
		}
	}
	// The waiter re-checks with Redis (a script) instead of taking the grant.
	e.eventually(ftPatience, "the waiter to re-check", func() bool { return e.scripts() > before })
	select {
	case r := <-got:
		t.Fatalf("a forged hand-off made Lock return while another Client holds the lock (err %v)", r.err)
	default:
	}
	tokB, _ := b.Mutex(name).Token(lb)
	mustUnlockFT(t, b.Mutex(name), lb)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Redis issues tokens from its clock in microseconds or above its
	// counter: never the forged ones, nor above the clock by more than the
	// blocks reserved since tokB.
	now, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseUint(now[0], 10, 64)
	usec, _ := strconv.ParseUint(now[1], 10, 64)
	if tok, _ := a.Mutex(name).Token(r.ctx); tok <= tokB || tok > max(sec*1_000_000+usec, tokB)+10*rlock.TokenBlock {
		t.Fatalf("token %d after %d (Redis clock %s.%s): only Redis issues tokens", tok, tokB, now[0], now[1])
	}
	mustUnlockFT(t, a.Mutex(name), r.ctx)
}

// Item 5: a re-entry whose reply is lost is retried under the same request,
// and counts once.
func TestHoldReentryLostReplyCountsOnce(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	const name = "reenter-lost"
	m := e.clientOn(fc).Mutex(name)
	l1 := ftLock(t, e.ctx, m)
	fc.set(once("reenter", ftLoseReply))
	l2, err := m.Lock(l1)
	if err != nil {
		t.Fatalf("re-entry with a lost reply: %v", err)
	}
	if n, err := m.HoldCount(l2); err != nil || n != 2 {
		t.Fatalf("HoldCount = %d, %v; want 2", n, err)
	}
	mustUnlockFT(t, m, l2)
	mustUnlockFT(t, m, l1)
	if e.exists(e.lockKey(name)) {
		t.Fatal("lock key left after as many Unlocks as Locks")
	}
}

// Item 6 (and 7, the same path): a final Unlock that fails gives the hold
// up: its context ends saying so, renewals stop, and the lock frees itself
// within one lease even when no clean-up reaches Redis.
func TestHoldFailedUnlockStopsRenewal(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	const name = "unlock-fails"
	const wd = 900 * time.Millisecond
	m := e.clientOn(fc, rlock.WithWatchdogTimeout(wd), rlock.WithUnlockTimeout(200*time.Millisecond)).Mutex(name)
	l := ftLock(t, e.ctx, m)
	fc.set(func(s string) *ftFault {
		if s == "release" || s == "abandon" {
			return &ftFailCall
		}
		return nil
	})
	err := m.Unlock(l)
	var ae *rlock.AbandonError
	if !errors.Is(err, rlock.ErrAbandoned) || !errors.As(err, &ae) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("failed Unlock: %v, want an AbandonError matching ErrAbandoned and the connection error", err)
	}
	if !errors.Is(context.Cause(l), rlock.ErrLeaseLost) || !errors.Is(context.Cause(l), rlock.ErrAbandoned) {
		t.Fatalf("lock context cause %v, want ErrLeaseLost and ErrAbandoned", context.Cause(l))
	}
	if limit := time.Until(ae.FreeBy); limit > 2*wd || limit < wd/2 {
		t.Fatalf("FreeBy in %v, want about one watchdog lease (%v) from now", limit, wd)
	}
	e.eventually(time.Until(ae.FreeBy)+ftPatience, "the lock to expire", func() bool { return !e.exists(e.lockKey(name)) })
	if late := time.Since(ae.FreeBy); late > 500*time.Millisecond {
		t.Fatalf("lock expired %v after FreeBy: renewals went on", late)
	}
}

// Item 8: a cohort hold re-entered with a fixed lease leaves the cohort; its
// final Unlock takes a bounded number of scripts and the next local waiter
// gets the lock.
func TestHoldCohortReenteredWithLease(t *testing.T) {
	e := ftNewEnv(t)
	a, b := e.client(), e.client()
	const name = "cohort-lease"
	l1, second := ftCohort(t, e, a, b, name)
	m := a.Mutex(name)
	l2 := ftLock(t, l1, m, rlock.WithLease(5*time.Second))
	before := e.scripts()
	start := time.Now()
	mustUnlockFT(t, m, l2)
	mustUnlockFT(t, m, l1)
	if took, n := time.Since(start), e.scripts()-before; took > time.Second || n > 6 {
		t.Fatalf("final Unlock took %v and %d scripts", took, n)
	}
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	mustUnlockFT(t, m, r.ctx)
}

// Item 11: with Redis down, a Lock that gives up reports that Redis could
// not be reached, not that the lock is held.
func TestHoldRedisDownIsNotContention(t *testing.T) {
	e := ftNewEnv(t)
	m := e.client().Mutex("down")
	redistest.KeepHeld(t, ftLock(t, e.ctx, m)) // warm: scripts loaded, connections up
	c2, c3 := e.client(), e.client()
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if errors.Is(err, rlock.ErrLocked) || !errors.Is(err, rlock.ErrUnavailable) ||
			!(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			t.Fatalf("%s with Redis down: %v; want ErrUnavailable wrapping the connection error, not ErrLocked", what, err)
		}
	}
	_, err := c2.Mutex("down2").Lock(e.ctx, rlock.WithWaitTimeout(time.Second))
	check("Lock(WithWaitTimeout)", err)
	ctx, cancel := context.WithTimeout(e.ctx, time.Second)
	defer cancel()
	_, err = c3.Mutex("down3").Lock(ctx)
	check("Lock(ctx with deadline)", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock(ctx with deadline): %v, want DeadlineExceeded too", err)
	}
}

// Item 14: a user that may not set the lock's expiry gets a clear error, and
// no lock without expiry is left behind.
func TestHoldDeniedExpiryLeavesNoLock(t *testing.T) {
	e := ftNewEnv(t)
	if _, err := e.srv.Do(e.ctx, "ACL", "SETUSER", "noexpire", "on", ">pw", "~*", "&*", "+@all", "-pexpire"); err != nil {
		t.Fatal(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.srv.Addr()}, Username: "noexpire", Password: "pw", DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	c, err := rlock.New(rc, rlock.WithKeyPrefix(e.prefix))
	if err != nil {
		if errors.Is(err, rlock.ErrInvalidOption) || strings.Contains(strings.ToLower(err.Error()), "pexpire") {
			return // New's probe refused the user up front: as good
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const name = "noexpire"
	_, err = c.Mutex(name).TryLock(e.ctx)
	if err == nil || !strings.Contains(strings.ToUpper(err.Error()), "PEXPIRE") {
		t.Fatalf("TryLock without PEXPIRE rights: %v, want an error naming PEXPIRE", err)
	}
	if e.exists(e.lockKey(name)) {
		t.Fatal("a lock key was left behind (it would never expire)")
	}
}

// Item 15: a queued owner handed the lock whose fencing counter is missing
// (evicted, deleted) still acquires, with a token from the clock.
func TestHoldMissingFenceCounter(t *testing.T) {
	e := ftNewEnv(t)
	const name = "nofence"
	m := e.client().Mutex(name)
	owner := "someone:1"
	// As a hand-off leaves it: the hash holds the owner; the counter is gone.
	if _, err := e.srv.Do(e.ctx, "HSET", e.lockKey(name), owner, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.Do(e.ctx, "PEXPIRE", e.lockKey(name), "10000"); err != nil {
		t.Fatal(err)
	}
	status, token, count, err := rlock.AcquireScript(e.ctx, m, owner, 10*time.Second)
	if err != nil || status != 1 || count != 1 {
		t.Fatalf("acquire = %d, token %d, count %d, %v; want acquired", status, token, count, err)
	}
	if floor := uint64(time.Now().Add(-time.Hour).UnixMicro()); token < floor {
		t.Fatalf("token %d: a missing counter must restart from the clock (above %d)", token, floor)
	}
}
