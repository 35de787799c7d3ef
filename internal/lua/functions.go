package lua

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/ctxcall"
)

// Redis runs a script's whole source at every EVALSHA, and each library
// function the source defines is a closure made anew, used or not (each
// script carries only the helpers it can call, shake.go, but a contended
// Mutex release still makes 35). The
// scripts of a lock kind are therefore also one Redis function library
// (FUNCTION LOAD, Redis 7): the libraries are made once per server, and a
// call (FCALL) runs only its script's body: 16 goroutines locking names of
// their own cost Redis 27.8-29.6us per script call so, against 34.0-37.1us
// by EVALSHA (docs/benchmarks.md).
//
// A Script runs as a function only for a Client made
// WithRedisFunctions(true) (anyone allowed FUNCTION LOAD could replace a
// library, where EVALSHA finds a script by the hash of its code), and only
// where the server allows it; by EVALSHA (then EVAL) elsewhere: Redis < 7, a
// user who may not FCALL or FUNCTION LOAD. The library is
// loaded when an FCALL finds it missing (a new server, a restart without
// persistence, FUNCTION FLUSH), on every node of the client at once. Its
// name carries a hash of its code, so that Clients of different versions
// share a server without replacing each other's functions; the libraries of
// versions no longer run stay until deleted (FUNCTION DELETE, see
// docs/operations.md).

// A Script is one lock script, run by Exec.
type Script struct {
	eval *rueidis.Lua
	lib  *library // nil: only ever run by EVALSHA
	fn   string   // its function's name in lib
}

// library is a Redis function library of the scripts of one lock kind.
type library struct {
	name string
	code string
}

// scriptBody is a script as a function library holds it: the body of a
// script whose libraries the library defines once.
type scriptBody struct {
	name string // unique within the library
	body string // the script's source without its libraries
	eval string // the whole script, as EVAL runs it
}

// newLibrary makes a Script of each body, all of them functions of one
// library whose code is libs (the shared Lua libraries, which must touch
// nothing of Redis until called) and a function per body that begins its
// call (script_begin, publish_lib.lua) and runs the body. KEYS and ARGV,
// the globals of a script run by EVAL, are the library's upvalues, set by
// each call: the libraries and bodies read them as they are.
func newLibrary(kind, libs string, bodies ...scriptBody) []*Script {
	var code strings.Builder
	code.WriteString("local KEYS, ARGV\n" + libs)
	for _, b := range bodies {
		code.WriteString("\nlocal function " + kind + "_" + b.name + "(keys, args)\nKEYS, ARGV = keys, args\n" + scriptBegin + b.body + "\nend\n")
	}
	sum := sha1.Sum([]byte(code.String()))
	lib := &library{name: "relock_" + kind + "_" + hex.EncodeToString(sum[:6])}
	scripts := make([]*Script, len(bodies))
	for i, b := range bodies {
		scripts[i] = &Script{eval: rueidis.NewLuaScript(b.eval), lib: lib, fn: lib.name + "_" + b.name}
		code.WriteString("redis.register_function('" + scripts[i].fn + "', " + kind + "_" + b.name + ")\n")
	}
	lib.code = "#!lua name=" + lib.name + "\n" + code.String()
	return scripts
}

// A Runner runs Scripts on one Redis deployment (a Client's), and
// remembers whether that deployment runs them as functions.
type Runner struct {
	rc rueidis.Client
	// evalOnly: every script runs by EVALSHA, because functions were turned
	// off or the server refused them.
	evalOnly atomic.Bool

	mu   sync.Mutex
	libs map[*library]*libraryState
}

// NewRunner runs scripts on rc, as functions unless functions is false.
func NewRunner(rc rueidis.Client, functions bool) *Runner {
	r := &Runner{rc: rc}
	r.evalOnly.Store(!functions)
	return r
}

// Functions reports whether the Runner still calls scripts as functions.
func (r *Runner) Functions() bool { return !r.evalOnly.Load() }

// EvalOnly makes the Runner run every script by EVALSHA from now on (the
// user may not run functions, as a probe found).
func (r *Runner) EvalOnly() { r.evalOnly.Store(true) }

// Exec runs s with keys (keys[0] the key whose node runs it) and args, as
// rueidis.Lua.Exec does: the reply or error is the script's. A function
// refused before it ran (missing, not permitted, the server out of memory)
// is run by EVALSHA instead, so that the caller sees what the script did,
// never the refusal of a way to call it; no call runs the script twice.
func (s *Script) Exec(ctx context.Context, r *Runner, keys, args []string) rueidis.RedisResult {
	if s.lib == nil || r.evalOnly.Load() {
		return s.eval.Exec(ctx, r.rc, keys, args)
	}
	loads, paused := r.loads(s.lib)
	if paused {
		return s.eval.Exec(ctx, r.rc, keys, args)
	}
	resp := r.fcall(ctx, s, keys, args)
	if notRun(resp) == fnMissing {
		if !r.load(ctx, s.lib, loads) {
			return s.eval.Exec(ctx, r.rc, keys, args)
		}
		resp = r.fcall(ctx, s, keys, args)
		if notRun(resp) == fnMissing {
			// Loaded, but not where the call went: a node the client did
			// not know yet, or one that refused it.
			r.pause(s.lib)
		}
	}
	switch notRun(resp) {
	case fnRefused:
		r.evalOnly.Store(true)
		return s.eval.Exec(ctx, r.rc, keys, args)
	case fnMissing, fnNoMemory:
		// Missing again (see above, or a failover to a replica the load
		// had not reached), or refused for memory where EVAL may still
		// run a script that frees: this call only.
		return s.eval.Exec(ctx, r.rc, keys, args)
	}
	return resp
}

func (r *Runner) fcall(ctx context.Context, s *Script, keys, args []string) rueidis.RedisResult {
	return r.rc.Do(ctx, r.rc.B().Fcall().Function(s.fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// loads is how many loads of lib the Runner has completed, and whether its
// calls of lib are paused (see pause).
func (r *Runner) loads(lib *library) (n uint64, paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.libs[lib]
	if st == nil {
		return 0, false
	}
	return st.loads, !st.pausedUntil.IsZero() && time.Now().Before(st.pausedUntil)
}

// functionPause is how long the calls of a library run by EVALSHA after a
// load that did not take (see pause).
const functionPause = time.Second

// pause sends the calls of lib to EVALSHA for functionPause, without an
// FCALL: a load was refused for a passing reason, or landed on another node
// than the calls, and each call would otherwise send the library again
// (55-70 KB) for nothing.
func (r *Runner) pause(lib *library) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state(lib).pausedUntil = time.Now().Add(functionPause)
}

// state is lib's state in the Runner, made on first use; r.mu is held.
func (r *Runner) state(lib *library) *libraryState {
	st := r.libs[lib]
	if st == nil {
		if r.libs == nil {
			r.libs = map[*library]*libraryState{}
		}
		st = &libraryState{}
		r.libs[lib] = st
	}
	return st
}

// libraryState is what a Runner knows of one library on its server.
type libraryState struct {
	loads       uint64       // loads completed (see load)
	loading     *libraryLoad // the load in flight
	pausedUntil time.Time    // see pause
}

// load loads lib (see loadNow), for a call that found it missing after seen
// loads (see loads), and reports whether it is there now.
// Calls that find lib missing together share one load (a library is 55-70
// KB, and a server restarted without persistence is met by every call in
// flight), and a call sent before a load completed only calls again. A
// server that refuses it for good (no FUNCTION LOAD for this user, no
// functions, a library it cannot compile) turns functions off for the
// Runner; a passing refusal (out of memory, busy, loading, a replica)
// pauses the library's calls (see pause), and a load that got no answer
// leaves this call to EVALSHA only.
func (r *Runner) load(ctx context.Context, lib *library, seen uint64) bool {
	r.mu.Lock()
	st := r.state(lib)
	if st.loads != seen {
		r.mu.Unlock()
		return true
	}
	if l := st.loading; l != nil {
		r.mu.Unlock()
		select {
		case <-l.done:
			return l.ok
		case <-ctx.Done():
			return false
		}
	}
	l := &libraryLoad{done: make(chan struct{})}
	st.loading = l
	r.mu.Unlock()

	var refused bool
	l.ok, refused = r.loadNow(ctx, lib)
	r.mu.Lock()
	st.loading = nil
	if l.ok {
		st.loads++
	}
	r.mu.Unlock()
	close(l.done)
	if refused && !l.ok {
		r.pause(lib)
	}
	return l.ok
}

// libraryLoad is a FUNCTION LOAD in flight, which calls that find the same
// library missing wait for (in a cluster the load may have gone to another
// node: a call that then finds its function missing again runs by EVALSHA).
type libraryLoad struct {
	done chan struct{}
	ok   bool // set before done is closed
}

// loadNow loads lib on every node of the Runner's client at once (a
// cluster's masters, whose replicas refuse it and get it from them), so
// that no call finds it missing on one node after another nor while a slot
// moves between masters (FUNCTION LOAD has no key to route it by). ok: some
// node has lib now; refused: some node refused it for a passing reason.
func (r *Runner) loadNow(ctx context.Context, lib *library) (ok, refused bool) {
	nodes := r.rc.Nodes()
	results := make(chan loadResult, len(nodes))
	for _, node := range nodes {
		go func() {
			cmd := node.B().FunctionLoad().FunctionCode(lib.code).Build()
			results <- loadOutcome(lib, ctxcall.Do(ctx, node.Do, cmd).Error())
		}()
	}
	for range nodes {
		switch <-results {
		case loaded:
			ok = true
		case loadRefused:
			refused = true
		case loadNever:
			r.evalOnly.Store(true)
		}
	}
	return ok, refused
}

type loadResult uint8

const (
	loadUnknown loadResult = iota // no answer
	loaded                        // the node has the library now
	loadRefused                   // refused for a passing reason (memory, busy, loading, a replica)
	loadNever                     // refused for good (rights, no functions, the code)
)

func loadOutcome(lib *library, err error) loadResult {
	if err == nil {
		return loaded
	}
	redisErr, isRedis := rueidis.IsRedisErr(err)
	if !isRedis {
		return loadUnknown
	}
	switch msg := serverMessage(redisErr); {
	case msg == "Library '"+lib.name+"' already exists":
		return loaded // loaded meanwhile by another Client
	case strings.HasPrefix(msg, "NOPERM"), isUnknownCommand(msg, "function"),
		strings.HasPrefix(msg, "Error compiling function"), strings.HasPrefix(msg, "Error registering functions"):
		return loadNever
	}
	return loadRefused
}

// How an FCALL was refused before its function ran.
type refusal uint8

const (
	fnRan      refusal = iota // it ran (or its fate is unknown): the reply stands
	fnMissing                 // the server has no such function
	fnRefused                 // the server has no FCALL, or the user may not run it
	fnNoMemory                // over maxmemory: a function that may write is not started
)

// notRun tells why resp's FCALL did not run its function, from the errors
// Redis sends before it starts one, matched whole (Redis 7.0-7.4 word them
// so): an error the function itself returned, such as a script's NOPERM
// naming a key or channel, which holds the caller's lock name, is fnRan
// whatever that name spells.
func notRun(resp rueidis.RedisResult) refusal {
	err, ok := rueidis.IsRedisErr(resp.Error())
	if !ok {
		return fnRan
	}
	switch msg := serverMessage(err); {
	case msg == "Function not found":
		return fnMissing
	case isUnknownCommand(msg, "fcall"),
		strings.HasPrefix(msg, "NOPERM") && strings.HasSuffix(msg, " has no permissions to run the 'fcall' command"):
		return fnRefused
	case msg == "OOM command not allowed when used memory > 'maxmemory'.":
		return fnNoMemory
	}
	return fnRan
}

// serverMessage is err's text without the "ERR " that Redis puts before a
// message of no other code.
func serverMessage(err *rueidis.RedisError) string {
	return strings.TrimPrefix(err.Error(), "ERR ")
}

// isUnknownCommand reports whether msg is a server's refusal of command
// (lower case) as unknown: "unknown command 'fcall', with args beginning
// with: ..." (quoted so or with backquotes, in any case).
func isUnknownCommand(msg, command string) bool {
	lower := strings.ToLower(msg)
	return strings.HasPrefix(lower, "unknown command '"+command+"'") || strings.HasPrefix(lower, "unknown command `"+command+"`")
}
