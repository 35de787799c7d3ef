package semaphore_test

// Integration tests of package semaphore against a real Redis (a private
// redis-server per test, or $REDIS_ADDR; see internal/redistest). Every test
// uses its own key prefix. Waits poll with deadlines; the only fixed waits are
// negative checks ("still blocked after a while") and simulated work.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// testTimeout bounds every test's Redis calls and waits; the tests finish
// long before it unless something hangs.
const testTimeout = 25 * time.Second

// prompt bounds a wake-up that must come over pub/sub: far above a round
// trip, far below the re-check period of the default watchdog (10s).
const prompt = 2 * time.Second

// env is one test's Redis, key prefix and raw client for inspecting keys.
type env struct {
	t      *testing.T
	srv    *redistest.Server
	raw    rueidis.Client
	prefix string
	ctx    context.Context
}

func newEnv(t *testing.T) *env { t.Helper(); return setupEnv(t, redistest.New(t)) }

// ownedEnv is newEnv on a server this process owns: for command statistics
// and killing connections, which would disturb a shared server.
func ownedEnv(t *testing.T) *env { t.Helper(); return setupEnv(t, redistest.Owned(t)) }

func setupEnv(t *testing.T, srv *redistest.Server) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return &env{
		t:      t,
		srv:    srv,
		raw:    redistest.Client(t, srv),
		prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":"),
		ctx:    ctx,
	}
}

// client returns a new rlock Client, standing for one process, on its own
// rueidis client and the test's key prefix; both are closed at cleanup (the
// rlock Client first).
func (e *env) client(opts ...rlock.Option) *rlock.Client {
	e.t.Helper()
	rc := redistest.Client(e.t, e.srv)
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// aclClient returns a Client, as client does, of the ACL user "app", made
// able to run everything, and acl, which changes that user's rules.
func (e *env) aclClient(opts ...rlock.Option) (c *rlock.Client, acl func(rules ...string)) {
	e.t.Helper()
	acl = func(rules ...string) {
		e.t.Helper()
		if _, err := e.srv.Do(e.ctx, append([]string{"ACL", "SETUSER", "app"}, rules...)...); err != nil {
			e.t.Fatalf("ACL SETUSER %v: %v", rules, err)
		}
	}
	acl("on", ">secret", "~*", "&*", "+@all")
	rc := redistest.Client(e.t, e.srv, func(o *rueidis.ClientOption) { o.Username, o.Password = "app", "secret" })
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		e.t.Fatalf("rlock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c, acl
}

// sem returns the semaphore name on c, making sure its limit is set (the
// first setter wins, as in production).
func (e *env) sem(c *rlock.Client, name string, limit int64) *semaphore.Semaphore {
	e.t.Helper()
	s := semaphore.New(c, name)
	if _, err := s.TrySetLimit(e.ctx, limit); err != nil {
		e.t.Fatalf("TrySetLimit(%d): %v", limit, err)
	}
	return s
}

// base is the state hash of semaphore name; every other key of it extends it.
func (e *env) base(name string) string { return e.prefix + ":{" + name + "}:sem" }

// wakeChannel is the channel on which releases used to wake waiters (before
// grants went to each Client's own channel); nothing is published on it now.
func (e *env) wakeChannel(name string) string { return e.base(name) + ":wake" }

func (e *env) state(s *semaphore.Semaphore) semaphore.State {
	e.t.Helper()
	st, err := s.State(e.ctx)
	if err != nil {
		e.t.Fatalf("State: %v", err)
	}
	return st
}

func (e *env) available(s *semaphore.Semaphore) int64 {
	e.t.Helper()
	n, err := s.Available(e.ctx)
	if err != nil {
		e.t.Fatalf("Available: %v", err)
	}
	return n
}

// waitState polls the semaphore's state until cond holds.
func (e *env) waitState(s *semaphore.Semaphore, timeout time.Duration, what string, cond func(semaphore.State) bool) semaphore.State {
	e.t.Helper()
	var st semaphore.State
	waitFor(e.t, timeout, what, func() bool {
		st = e.state(s)
		return cond(st)
	}, func() string { return "last state " + stateString(st) })
	return st
}

// waitQueued polls until exactly n waiters are queued in Redis.
func (e *env) waitQueued(s *semaphore.Semaphore, n int64) {
	e.t.Helper()
	e.waitState(s, 5*time.Second, "queue length "+itoa(n), func(st semaphore.State) bool { return st.Queued == n })
}

// keys lists every key under the test's prefix.
func (e *env) keys() []string {
	e.t.Helper()
	var all []string
	var cursor uint64
	for {
		entry, err := e.raw.Do(e.ctx, e.raw.B().Scan().Cursor(cursor).Match(e.prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			e.t.Fatalf("SCAN: %v", err)
		}
		all = append(all, entry.Elements...)
		if cursor = entry.Cursor; cursor == 0 {
			slices.Sort(all)
			return all
		}
	}
}

// leases returns the permit ids in the permits zset of name.
func (e *env) leases(name string) []string {
	e.t.Helper()
	ids, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.base(name)+":permits").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) hgetall(key string) map[string]string {
	e.t.Helper()
	m, err := e.raw.Do(e.ctx, e.raw.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		e.t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

func (e *env) numSub(channel string) int64 {
	e.t.Helper()
	counts, err := e.srv.NumSub(e.ctx, channel)
	if err != nil {
		e.t.Fatalf("NUMSUB: %v", err)
	}
	return counts[channel]
}

// unexpectedKeys returns the keys of semaphore name other than its state hash
// and the kinds allowed to outlive the permits and waiters: release latches and
// abandon tombstones, which expire by themselves.
func (e *env) unexpectedKeys(name string, allowedKinds ...string) []string {
	e.t.Helper()
	base := e.base(name)
	var bad []string
next:
	for _, k := range e.keys() {
		if k == base {
			continue
		}
		for _, kind := range allowedKinds {
			if strings.HasPrefix(k, base+":"+kind+":") {
				continue next
			}
		}
		bad = append(bad, k)
	}
	return bad
}

// waitFor polls cond until it holds, failing the test after timeout; detail,
// if given, describes the last observation.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			for _, d := range detail {
				msg += "; " + d()
			}
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, msg)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func mustAcquire(t *testing.T, s *semaphore.Semaphore, ctx context.Context, n int64, opts ...semaphore.AcquireOption) context.Context {
	t.Helper()
	permitCtx, err := s.Acquire(ctx, n, opts...)
	if err != nil {
		t.Fatalf("Acquire(%d): %v", n, err)
	}
	if got := s.Permits(permitCtx); got != n {
		t.Fatalf("Permits after Acquire(%d) = %d", n, got)
	}
	return permitCtx
}

func mustRelease(t *testing.T, s *semaphore.Semaphore, permitCtx context.Context) {
	t.Helper()
	if err := s.Release(permitCtx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if cause := context.Cause(permitCtx); !errors.Is(cause, semaphore.ErrReleased) {
		t.Fatalf("permit context cause after Release = %v, want ErrReleased", cause)
	}
}

// acquired is the outcome of an Acquire run on its own goroutine.
type acquired struct {
	ctx context.Context
	err error
	at  time.Time
}

// goAcquire runs Acquire on a goroutine; the result arrives on the channel,
// which is buffered so the goroutine never blocks (a test that fails early
// lets it end when the Client is closed at cleanup).
func goAcquire(s *semaphore.Semaphore, ctx context.Context, n int64, opts ...semaphore.AcquireOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		permitCtx, err := s.Acquire(ctx, n, opts...)
		ch <- acquired{ctx: permitCtx, err: err, at: time.Now()}
	}()
	return ch
}

// receive waits for a goroutine's Acquire, failing the test after timeout or
// when it failed.
func receive(t *testing.T, ch <-chan acquired, timeout time.Duration, what string) acquired {
	t.Helper()
	r := receiveErr(t, ch, timeout, what)
	if r.err != nil {
		t.Fatalf("%s: Acquire: %v", what, r.err)
	}
	return r
}

// receiveErr is receive for an Acquire that may fail.
func receiveErr(t *testing.T, ch <-chan acquired, timeout time.Duration, what string) acquired {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		t.Fatalf("%s: Acquire still blocked after %v", what, timeout)
		return acquired{}
	}
}

// stillBlocked is a negative check: the Acquire must not return within d.
func stillBlocked(t *testing.T, ch <-chan acquired, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Acquire returned early (err %v)", what, r.err)
	case <-time.After(d):
	}
}

func waitDone(t *testing.T, ctx context.Context, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(timeout):
		t.Fatalf("%s: context not done after %v", what, timeout)
	}
}

func stateString(st semaphore.State) string {
	return "{Limit " + itoa(st.Limit) + ", Held " + itoa(st.Held) + ", Queued " + itoa(st.Queued) + "}"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
