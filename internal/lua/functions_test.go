package lua

import (
	"context"
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
