package lua

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
)

// functionsServer is a private server for a test that changes its
// configuration (maxmemory, users) or flushes its functions; the test is
// skipped on a server without functions (Redis < 7).
func functionsServer(t *testing.T) (*redistest.Server, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	srv := redistest.Owned(t)
	if _, err := srv.Do(ctx, "FUNCTION", "LIST"); err != nil {
		t.Skipf("no Redis functions on this server: %v", err)
	}
	return srv, ctx
}

// Every library the scripts make loads as it is: a library Redis refuses
// (a global read at load, more than 60 upvalues in a function) would only
// ever run by EVALSHA, which nothing else would notice.
func TestLibrariesLoad(t *testing.T) {
	srv, ctx := functionsServer(t)
	seen := map[*library]bool{}
	for _, s := range []*Script{Acquire, Release, ForceUnlock, Abandon, QuorumAcquire, QuorumLeave,
		RWAcquire, RWRelease, RWAbandon, SemAcquire, SemRelease, SemAbandon, SemLimit} {
		if s.lib == nil || seen[s.lib] {
			continue
		}
		seen[s.lib] = true
		if _, err := srv.Do(ctx, "FUNCTION", "LOAD", s.lib.code); err != nil {
			t.Fatalf("FUNCTION LOAD %s: %v", s.lib.name, err)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no script is a function")
	}
}

// A test library: its one function counts its calls in KEYS[1] and replies
// with ARGV[1] as an error when given one, else with the count.
var countScripts = newLibrary("zztest", publishLibSrc, scriptBody{"count", countBody, script(publishLibSrc, countBody)})

const countBody = `local n = redis.call('INCR', KEYS[1])
if ARGV[1] ~= '' then
  return redis.error_reply(ARGV[1])
end
return n
`

func countCalls(t *testing.T, ctx context.Context, r *Runner, key, reply string) (int64, error) {
	t.Helper()
	return countScripts[0].Exec(ctx, r, []string{key}, []string{reply}).AsInt64()
}

func commandCalls(t *testing.T, ctx context.Context, srv *redistest.Server, cmd string) int64 {
	t.Helper()
	st, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st[cmd]
}

// A missing library is loaded on the first call and after FUNCTION FLUSH, and
// the script runs once each time, as a function.
func TestRunnerLoadsMissingLibrary(t *testing.T) {
	srv, ctx := functionsServer(t)
	r := NewRunner(redistest.Client(t, srv), true)
	for i := int64(1); i <= 3; i++ {
		if i == 3 {
			if _, err := srv.Do(ctx, "FUNCTION", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := countCalls(t, ctx, r, "k", ""); err != nil || n != i {
			t.Fatalf("call %d: %d, %v; want %d", i, n, err, i)
		}
	}
	if got := commandCalls(t, ctx, srv, "evalsha") + commandCalls(t, ctx, srv, "eval"); got != 0 {
		t.Fatalf("%d calls by EVALSHA or EVAL, want none", got)
	}
	if got := commandCalls(t, ctx, srv, "function|load"); got != 2 {
		t.Fatalf("%d FUNCTION LOADs, want 2 (the first call, and the one after the flush)", got)
	}
	if !r.Functions() {
		t.Fatal("the Runner stopped using functions")
	}
}

// An error the function returns is its reply: the script is not run again
// by EVALSHA, and functions stay on, whatever the error says. A script's
// refusal names a key or channel, which holds the caller's lock name: one
// that spells a server's refusal of FCALL must not pass for it.
func TestRunnerKeepsTheFunctionsError(t *testing.T) {
	srv, ctx := functionsServer(t)
	r := NewRunner(redistest.Client(t, srv), true)
	runs := int64(0)
	for _, reply := range []string{
		"NOPERM the Redis user may not run SET on k, which the lock scripts need",
		"NOPERM the Redis user may not run PUBLISH on rlock:{Function not found}:to:c1, which the lock scripts need",
		"NOPERM the Redis user may not run HSET on rlock:{'fcall'}, which the lock scripts need; nothing was changed",
		"NOPERM the Redis user may not run HSET on rlock:{x has no permissions to run the 'fcall' command}",
		"OOM command not allowed when used memory > 'maxmemory'. script: x",
	} {
		_, err := countCalls(t, ctx, r, "k", reply)
		if err == nil || !strings.Contains(err.Error(), reply) {
			t.Fatalf("error %v, want the function's own %q", err, reply)
		}
		runs++
		if n, err := srv.Do(ctx, "GET", "k"); err != nil {
			t.Fatal(err)
		} else if v, _ := n.ToString(); v != strconv.FormatInt(runs, 10) {
			t.Fatalf("after the reply %q: the script ran %s times in all, want %d (once a call)", reply, v, runs)
		}
		if !r.Functions() {
			t.Fatalf("the script's own error %q turned functions off", reply)
		}
	}
}

// Calls that find the library missing together share one FUNCTION LOAD, and
// each runs its script once.
func TestRunnerSharesALoad(t *testing.T) {
	srv, ctx := functionsServer(t)
	r := NewRunner(redistest.Client(t, srv), true)
	const calls = 100
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if _, err := countCalls(t, ctx, r, "k", ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := commandCalls(t, ctx, srv, "function|load"); got != 1 {
		t.Errorf("%d FUNCTION LOADs for %d calls, want 1", got, calls)
	}
	if n, err := srv.Do(ctx, "GET", "k"); err != nil {
		t.Fatal(err)
	} else if v, _ := n.ToString(); v != strconv.Itoa(calls) {
		t.Errorf("the script ran %s times for %d calls", v, calls)
	}
}

// A user who may not FCALL, or may FCALL but not FUNCTION LOAD, gets the
// script run by EVALSHA, once, and the Runner uses EVALSHA from then on.
func TestRunnerFallsBackWithoutTheRights(t *testing.T) {
	for _, tc := range []struct{ name, rule string }{
		{"no fcall", "-fcall"},
		{"no function load", "-function|load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ctx := functionsServer(t)
			if _, err := srv.Do(ctx, "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all", tc.rule); err != nil {
				t.Fatal(err)
			}
			rc := redistest.Client(t, srv, func(o *rueidis.ClientOption) { o.Username, o.Password = "u", "pw" })
			r := NewRunner(rc, true)
			for i := int64(1); i <= 2; i++ {
				if n, err := countCalls(t, ctx, r, "k", ""); err != nil || n != i {
					t.Fatalf("call %d: %d, %v; want %d", i, n, err, i)
				}
			}
			if r.Functions() {
				t.Fatal("the Runner still uses functions")
			}
			if got := commandCalls(t, ctx, srv, "fcall"); got > 1 {
				t.Fatalf("%d FCALLs, want at most the first", got)
			}
		})
	}
}

// Over maxmemory a function that may write is refused before it starts,
// where EVAL still runs a script until it writes, and a library cannot be
// loaded: each call runs by EVALSHA, and functions stay on for later calls.
func TestRunnerOverMaxMemory(t *testing.T) {
	srv, ctx := functionsServer(t)
	r := NewRunner(redistest.Client(t, srv), true)
	if _, err := countCalls(t, ctx, r, "k", ""); err != nil { // loads the library
		t.Fatal(err)
	}
	if _, err := srv.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "noeviction", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	readOnly := newLibrary("zzget", publishLibSrc, scriptBody{"get", getBody, script(publishLibSrc, getBody)})[0]
	if _, err := srv.Do(ctx, "FUNCTION", "LOAD", readOnly.lib.code); err == nil {
		t.Fatal("FUNCTION LOAD over maxmemory succeeded: the test cannot tell the fallback")
	}
	evals := commandCalls(t, ctx, srv, "evalsha") + commandCalls(t, ctx, srv, "eval")
	got, err := readOnly.Exec(ctx, r, []string{"k"}, nil).ToString()
	if err != nil || got != "1" {
		t.Fatalf("GET over maxmemory: %q, %v; want the script's reply", got, err)
	}
	if _, err := countCalls(t, ctx, r, "k", ""); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("INCR over maxmemory: %v, want the script's own OOM", err)
	}
	// (An FCALL refused for memory counts as rejected, not as a call.)
	if d := commandCalls(t, ctx, srv, "evalsha") + commandCalls(t, ctx, srv, "eval") - evals; d < 2 {
		t.Fatalf("%d calls by EVALSHA or EVAL over maxmemory, want one for each FCALL refused", d)
	}
	if !r.Functions() {
		t.Fatal("maxmemory turned functions off for good")
	}
}

const getBody = "return redis.call('GET', KEYS[1])\n"

// functionLoads is how many FUNCTION LOADs srv ran or refused.
func functionLoads(t *testing.T, ctx context.Context, srv *redistest.Server) int64 {
	t.Helper()
	msg, err := srv.Do(ctx, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := msg.ToString()
	for line := range strings.Lines(text) {
		if fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_function|load:"); ok {
			var n int64
			for field := range strings.SplitSeq(fields, ",") {
				for _, name := range []string{"calls=", "rejected_calls="} {
					if v, ok := strings.CutPrefix(field, name); ok {
						x, _ := strconv.ParseInt(v, 10, 64)
						n += x
					}
				}
			}
			return n
		}
	}
	return 0
}

// A load refused for a passing reason (here maxmemory) pauses the library's
// calls, which run by EVALSHA without sending it again, for functionPause;
// then a call loads it.
func TestRunnerPausesAfterARefusedLoad(t *testing.T) {
	srv, ctx := functionsServer(t)
	r := NewRunner(redistest.Client(t, srv), true)
	if _, err := srv.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "noeviction", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	get := newLibrary("zzpause", publishLibSrc, scriptBody{"get", getBody, script(publishLibSrc, getBody)})[0]
	for i := range 10 {
		if got, err := get.Exec(ctx, r, []string{"k"}, nil).ToString(); err != nil || got != "v" {
			t.Fatalf("call %d: %q, %v; want the script's reply", i, got, err)
		}
	}
	if n := functionLoads(t, ctx, srv); n != 1 {
		t.Fatalf("%d FUNCTION LOADs for 10 calls over maxmemory, want 1 (then a pause)", n)
	}
	if _, err := srv.Do(ctx, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * functionPause)
	for functionLoads(t, ctx, srv) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no FUNCTION LOAD within %v of the pause", 5*functionPause)
		}
		if _, err := get.Exec(ctx, r, []string{"k"}, nil).ToString(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // a call every 10ms: the pause's end is polled, not awaited
	}
	if !r.Functions() {
		t.Fatal("functions went off")
	}
}

// FUNCTION LOAD has no key to route it by: the first call that finds the
// library missing loads it on every master, so that calls on a slot being
// moved find it on the new owner as on the old, and neither is sent it again
// (routed to the slot's owner, the load reached the old owner while the
// calls reached the new one, and every call sent it again).
func TestRunnerLoadsEveryMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := redistest.NewCluster(t, 2, 0)
	if _, err := c.Masters[0].Do(ctx, "FUNCTION", "LIST"); err != nil {
		t.Skipf("no Redis functions on this server: %v", err)
	}
	r := NewRunner(redistest.ClusterClient(t, c), true)
	slot, _, to, err := c.SlotToMove(ctx, "{zz}")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := countCalls(t, ctx, r, "{zz}:0", ""); err != nil || n != 1 {
		t.Fatalf("first call: %d, %v", n, err)
	}
	const calls = 20
	err = c.MoveSlot(ctx, slot, to, func() error {
		for i := 1; i <= calls; i++ {
			if n, err := countCalls(t, ctx, r, "{zz}:"+strconv.Itoa(i), ""); err != nil || n != 1 {
				return fmt.Errorf("call %d on the moving slot: %d, %v", i, n, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Masters {
		if n := functionLoads(t, ctx, m); n != 1 {
			t.Errorf("%s: %d FUNCTION LOADs for %d calls, %d while the slot moved; want 1", m, n, calls+1, calls)
		}
	}
	if got := commandCalls(t, ctx, to, "evalsha") + commandCalls(t, ctx, to, "eval"); got != 0 {
		t.Errorf("the new owner ran %d scripts by EVALSHA or EVAL, want none", got)
	}
}
