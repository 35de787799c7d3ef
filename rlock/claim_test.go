package rlock_test

// Claim windows (WithClaimWindow): a hand-off grants the lock for a few
// seconds, which the grantee's Client extends to the lease once it has the
// grant, so that a grantee that cannot take the lock up (paused, or stuck
// with its connection open) holds the queue up for seconds, not a lease.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

type lockResult struct {
	lc  context.Context
	err error
	at  time.Time
}

// lockAsync runs m.Lock(ctx, opts...) in a goroutine.
func lockAsync(ctx context.Context, m *rlock.Mutex, opts ...rlock.LockOption) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		lc, err := m.Lock(ctx, opts...)
		ch <- lockResult{lc, err, time.Now()}
	}()
	return ch
}

func receiveLock(t *testing.T, ch <-chan lockResult, within time.Duration, what string) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r
	case <-time.After(within):
		t.Fatalf("%s did not get the lock within %v", what, within)
	}
	return lockResult{}
}

// A grantee that takes the lock up keeps it past the claim window: its Client
// extended the grant to the watchdog's lease, and the hold (its fencing
// token, its owner field in Redis) is the one the hand-off made.
func TestClaimExtended(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-extended"
	holder, waiter := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	ch := lockAsync(e.ctx, waiter.Mutex(name))
	e.queuedIs(1)
	mustUnlockFT(t, holder.Mutex(name), held)
	r := receiveLock(t, ch, ftPatience, "the waiter")
	m := waiter.Mutex(name)
	token, err := m.Token(r.lc)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey(name)).Build()))
	if err != nil || len(owners) != 1 {
		t.Fatalf("HKEYS = %q, %v", owners, err)
	}
	if ttl, err := m.TTL(e.ctx); err != nil || ttl > rlock.DefaultClaimWindow {
		t.Fatalf("TTL after the hand-off = %v, %v; want at most the claim window", ttl, err)
	}
	// The extension: about a third of the window after the grant.
	e.eventually(ftPatience, "the grant extended past the claim window", func() bool {
		ttl, err := m.TTL(e.ctx)
		return err == nil && ttl > rlock.DefaultClaimWindow
	})
	// Hold well past the claim window.
	select {
	case <-r.lc.Done():
		t.Fatalf("the hold ended: %v", context.Cause(r.lc))
	case <-time.After(time.Until(r.at.Add(rlock.DefaultClaimWindow + time.Second))):
	}
	if tok, _ := m.Token(r.lc); tok != token {
		t.Errorf("token = %d after the extension, want %d (the hand-off's)", tok, token)
	}
	if got, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey(name)).Build())); err != nil || len(got) != 1 || got[0] != owners[0] {
		t.Errorf("HKEYS = %q, %v; want %q still", got, err, owners)
	}
	mustUnlockFT(t, m, r.lc)
}

// A WithLease hold handed the lock confirms the grant on receipt, with one
// round trip that sets its whole lease: the watchdog, which extends claims,
// does not renew it.
func TestClaimWithLease(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-lease"
	const lease = 20 * time.Second
	holder, waiter := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	ch := lockAsync(e.ctx, waiter.Mutex(name), rlock.WithLease(lease))
	e.queuedIs(1)
	mustUnlockFT(t, holder.Mutex(name), held)
	r := receiveLock(t, ch, ftPatience, "the waiter")
	m := waiter.Mutex(name)
	if ttl, err := m.TTL(e.ctx); err != nil || ttl <= rlock.DefaultClaimWindow || ttl > lease {
		t.Fatalf("TTL of a WithLease hold just handed off = %v, %v; want its lease (%v)", ttl, err, lease)
	}
	mustUnlockFT(t, m, r.lc)
}

// A grantee stuck with its connection open (the proxy in front of its Client
// stalls: nothing moves, nothing closes) right after it took the lock up,
// before its Client extended the grant: PUBLISH counted it as a receiver, so
// the release could not skip it. The waiter behind it gets the lock once the
// claim window lapses (it was told to re-check then), not after a lease, and
// the stuck grantee's lock context ends with ErrLeaseLost.
func TestStuckGranteeHoldsQueueForClaimWindow(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-stuck"
	holder, next := e.client(), e.client()
	p, err := faultproxy.Start(e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	stuck := e.clientOn(redistest.Client(t, e.srv, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} }))

	held := ftLock(t, e.ctx, holder.Mutex(name))
	stuckCh := lockAsync(e.ctx, stuck.Mutex(name))
	e.queuedIs(1)
	nextCh := lockAsync(e.ctx, next.Mutex(name))
	e.queuedIs(2)

	mustUnlockFT(t, holder.Mutex(name), held)
	granted := receiveLock(t, stuckCh, ftPatience, "the grantee")
	p.Stall()
	defer p.Resume()

	r := receiveLock(t, nextCh, 10*time.Second, "the waiter behind the stuck grantee")
	waited := r.at.Sub(granted.at)
	t.Logf("the waiter behind the stuck grantee got the lock %v after the hand-off", waited)
	if waited < rlock.DefaultClaimWindow/2 {
		t.Errorf("the waiter got the lock %v after the hand-off: before the grantee's claim could lapse", waited)
	}
	select {
	case <-granted.lc.Done():
	case <-time.After(ftPatience):
		t.Fatal("the stuck grantee's lock context did not end")
	}
	if cause := context.Cause(granted.lc); !errors.Is(cause, rlock.ErrLeaseLost) {
		t.Errorf("the stuck grantee's lock context ended with %v, want ErrLeaseLost", cause)
	}
	if n, err := e.raw.Do(e.ctx, e.raw.B().Zcard().Key(e.lockKey(name)+":queue").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("queue length = %d, %v; want 0 (the grantee left it with the grant, the next one with the lock)", n, err)
	}
	p.Resume()
	if err := stuck.Mutex(name).Unlock(granted.lc); !errors.Is(err, rlock.ErrLeaseLost) && !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("the resumed grantee's Unlock: %v, want the lease lost", err)
	}
	mustUnlockFT(t, next.Mutex(name), r.lc)
}

// workerProcessEnv carries a workerSpec to the test binary started as a
// worker process.
const workerProcessEnv = "RLOCK_TEST_WORKER"

type workerSpec struct {
	Addr, Prefix, Name string
	Claim              time.Duration
}

// workerProcess is the main function of a worker process: it waits for the
// Mutex of spec's name, prints "acquired <token>" when Lock returns, then
// "lost <cause is ErrLeaseLost>" when its lock context ends, and exits; it
// gives up after a minute, so that it never outlives a test that died.
func workerProcess(spec string) int {
	var ws workerSpec
	if err := json.Unmarshal([]byte(spec), &ws); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{ws.Addr}, DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix(ws.Prefix), rlock.WithClaimWindow(ws.Claim))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	defer c.Close()
	m := c.Mutex(ws.Name)
	lc, err := m.Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	token, _ := m.Token(lc)
	fmt.Printf("acquired %d\n", token)
	<-lc.Done()
	fmt.Printf("lost %v\n", errors.Is(context.Cause(lc), rlock.ErrLeaseLost))
	return 0
}

// workerProc is a worker process started by startWorker, with its output
// lines.
type workerProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
}

// startWorker starts a worker process that waits for the lock called name
// with the claim window claim; it is killed at cleanup.
func (e *ftEnv) startWorker(name string, claim time.Duration) *workerProc {
	t := e.t
	t.Helper()
	spec, _ := json.Marshal(workerSpec{Addr: e.srv.Addr(), Prefix: e.prefix, Name: name, Claim: claim})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &workerProc{t: t, cmd: cmd, lines: make(chan string, 2)}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return w
}

// line returns the worker's next output line, failing the test when none
// comes within ftPatience.
func (w *workerProc) line(what string) string {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("the worker process exited before %s", what)
		}
		return l
	case <-time.After(ftPatience):
		w.t.Fatalf("the worker process did not report %s within %v", what, ftPatience)
	}
	return ""
}

// signal sends sig to the worker; a SIGSTOP returns once every thread of
// the worker is stopped, so that it can take nothing that comes after (a
// thread still runnable on a loaded machine would: a grant read and taken
// up, the claim then lapsing during the pause).
func (w *workerProc) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		ctx, cancel := context.WithTimeout(context.Background(), ftPatience)
		defer cancel()
		if err := redistest.WaitStopped(ctx, w.cmd.Process.Pid); err != nil {
			w.t.Fatal(err)
		}
	}
}

// A grantee whose process is paused (SIGSTOP) right after it took the lock
// up, with its connections open: the waiter behind it gets the lock within
// about the claim window, far from the 30s lease, and the paused process,
// once resumed, sees its lease lost.
func TestPausedGranteeProcess(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-paused"
	const claim = 4 * time.Second // a little margin for the test to pause it before the extension
	holder, next := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	w := e.startWorker(name, claim)
	e.queuedIs(1)
	nextCh := lockAsync(e.ctx, next.Mutex(name))
	e.queuedIs(2)

	mustUnlockFT(t, holder.Mutex(name), held)
	if l := w.line("the lock"); !strings.HasPrefix(l, "acquired ") {
		t.Fatalf("worker process said %q, want acquired", l)
	}
	w.signal(syscall.SIGSTOP)
	paused := time.Now()
	r := receiveLock(t, nextCh, 10*time.Second, "the waiter behind the paused grantee")
	t.Logf("the waiter behind the paused grantee got the lock %v after the pause (claim window %v)", r.at.Sub(paused), claim)
	if n, err := e.raw.Do(e.ctx, e.raw.B().Zcard().Key(e.lockKey(name)+":queue").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("queue length = %d, %v; want 0", n, err)
	}

	w.signal(syscall.SIGCONT)
	if l := w.line("its lease lost"); l != "lost true" {
		t.Errorf("resumed worker process said %q, want its lock context ended with ErrLeaseLost", l)
	}
	// The lock stayed with the waiter that took it over.
	if _, err := next.Mutex(name).Token(r.lc); err != nil || r.lc.Err() != nil {
		t.Errorf("the new holder's hold: %v, %v", err, r.lc.Err())
	}
	mustUnlockFT(t, next.Mutex(name), r.lc)
}

// A waiter whose process is paused (SIGSTOP) while it is queued at the head,
// so that the hand-off reaches its open connection but not its code: the
// waiter behind it gets the lock within about the claim window, and the
// paused process, once resumed, reads a grant too old to trust, checks with
// Redis, and queues again: it gets the lock only after the new holder
// releases it, with a higher fencing token.
func TestPausedWaiterProcess(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-paused-waiter"
	holder, next := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	w := e.startWorker(name, rlock.DefaultClaimWindow)
	e.queuedIs(1)
	nextCh := lockAsync(e.ctx, next.Mutex(name))
	e.queuedIs(2)

	w.signal(syscall.SIGSTOP)
	start := time.Now()
	mustUnlockFT(t, holder.Mutex(name), held)
	r := receiveLock(t, nextCh, 10*time.Second, "the waiter behind the paused one")
	t.Logf("the waiter behind the paused one got the lock %v after the unlock", r.at.Sub(start))
	token, _ := next.Mutex(name).Token(r.lc)

	w.signal(syscall.SIGCONT)
	// While the new holder holds, the resumed waiter must not believe it
	// holds too: give it a claim window to (wrongly) say so.
	select {
	case l := <-w.lines:
		t.Fatalf("the resumed waiter said %q while another holds the lock", l)
	case <-time.After(rlock.DefaultClaimWindow):
	}
	e.queuedIs(1) // queued again
	mustUnlockFT(t, next.Mutex(name), r.lc)
	l := w.line("the lock")
	var got uint64
	if _, err := fmt.Sscanf(l, "acquired %d", &got); err != nil || got <= token {
		t.Errorf("the resumed waiter said %q, want acquired with a token above %d", l, token)
	}
}

// Two waiters paused (SIGSTOP) at the head of the queue, one behind the
// other: each is handed the lock in turn for its claim window, and the live
// waiter behind them gets it after about two windows, not after its own
// re-check interval (4/5 of the 30s watchdog timeout): the hand-off to the
// first told it when that claim lapses, so its re-check handed the lock to
// the second and learned when that claim lapses in turn.
func TestTwoPausedWaitersInARow(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-two-paused"
	holder, next := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	first := e.startWorker(name, rlock.DefaultClaimWindow)
	e.queuedIs(1)
	second := e.startWorker(name, rlock.DefaultClaimWindow)
	e.queuedIs(2)
	nextCh := lockAsync(e.ctx, next.Mutex(name))
	e.queuedIs(3)

	first.signal(syscall.SIGSTOP)
	second.signal(syscall.SIGSTOP)
	start := time.Now()
	mustUnlockFT(t, holder.Mutex(name), held)
	r := receiveLock(t, nextCh, 4*rlock.DefaultClaimWindow, "the waiter behind two paused ones")
	waited := r.at.Sub(start)
	t.Logf("the waiter behind two paused ones got the lock %v after the unlock (claim window %v)", waited, rlock.DefaultClaimWindow)
	if waited < rlock.DefaultClaimWindow {
		t.Errorf("the waiter got the lock %v after the unlock: before the first paused waiter's claim could lapse", waited)
	}
	mustUnlockFT(t, next.Mutex(name), r.lc)
}

// A hold in its claim window that passes the lock on to another goroutine of
// its Client (a cohort pass, no round trip) passes the pending extension with
// it: the new holder keeps the lock past the window, with the next token.
func TestClaimPassedOnInCohort(t *testing.T) {
	e := ftNewEnv(t)
	const name = "claim-cohort"
	holder, waiter := e.client(), e.client()
	held := ftLock(t, e.ctx, holder.Mutex(name))
	m := waiter.Mutex(name)
	first := lockAsync(e.ctx, m)
	e.queuedIs(1) // the cohort's leader, queued in Redis
	second := lockAsync(e.ctx, m)
	e.eventually(ftPatience, "two Lock calls waiting in the Client", func() bool { return rlock.WaitingInClient(waiter, name) == 2 })

	mustUnlockFT(t, holder.Mutex(name), held)
	r1 := receiveLock(t, first, ftPatience, "the leader")
	if !rlock.CohortHeld(waiter, name) {
		t.Fatal("the leader's hold formed no cohort: nothing to pass on")
	}
	token, _ := m.Token(r1.lc)
	mustUnlockFT(t, m, r1.lc) // passed on locally, within the claim window
	r2 := receiveLock(t, second, ftPatience, "the second goroutine")
	if tok, _ := m.Token(r2.lc); tok != token+1 {
		t.Errorf("passed hold has token %d, want %d", tok, token+1)
	}
	select {
	case <-r2.lc.Done():
		t.Fatalf("the passed hold ended: %v", context.Cause(r2.lc))
	case <-time.After(time.Until(r1.at.Add(rlock.DefaultClaimWindow + time.Second))):
	}
	if ttl, err := m.TTL(e.ctx); err != nil || ttl <= rlock.DefaultClaimWindow {
		t.Errorf("TTL = %v, %v past the claim window; want it extended to the lease", ttl, err)
	}
	mustUnlockFT(t, m, r2.lc)
}
