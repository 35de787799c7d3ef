package lua

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Redis runs a script's whole source at every EVALSHA, and each library
// function the source defines is a closure made anew, used or not. The
// scripts of a lock kind are therefore also one Redis function library
// (FUNCTION LOAD, Redis 7): the libraries are made once per server, and a
// call (FCALL) runs only its script's body: 16 goroutines locking names of
// their own cost Redis 27.8-29.6us per script call so, against 34.0-37.1us
// by EVALSHA (docs/benchmarks.md).
//
// A Script runs as a function where the server allows it and by EVALSHA
// (then EVAL) where it does not: Redis < 7, a user who may not FCALL or
// FUNCTION LOAD, or a Client made WithRedisFunctions(false). The library is
// loaded when an FCALL finds it missing (a new server, a restart without
// persistence, FUNCTION FLUSH), on the node that serves the call's key. Its
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
	resp := r.fcall(ctx, s, keys, args)
	if notRun(resp) == fnMissing {
		if !r.load(ctx, s.lib, keys[0]) {
			return s.eval.Exec(ctx, r.rc, keys, args)
		}
		resp = r.fcall(ctx, s, keys, args)
	}
	switch notRun(resp) {
	case fnRefused:
		r.evalOnly.Store(true)
		return s.eval.Exec(ctx, r.rc, keys, args)
	case fnMissing, fnNoMemory:
		// Missing again (a failover to a replica the load had not
		// reached), or refused for memory where EVAL may still run a
		// script that frees: this call only.
		return s.eval.Exec(ctx, r.rc, keys, args)
	}
	return resp
}

func (r *Runner) fcall(ctx context.Context, s *Script, keys, args []string) rueidis.RedisResult {
	return r.rc.Do(ctx, r.rc.B().Fcall().Function(s.fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// load loads lib on the node that serves key, and reports whether it is
// there now. A server that refuses it for good (no FUNCTION LOAD for this
// user, no functions, a library it cannot compile) turns functions off for
// the Runner; a passing refusal (no answer, out of memory, busy, loading, a
// replica) leaves this call to EVALSHA only.
func (r *Runner) load(ctx context.Context, lib *library, key string) bool {
	err := r.rc.Do(ctx, r.rc.B().FunctionLoad().FunctionCode(lib.code).Build().SetSlot(key)).Error()
	if err == nil {
		return true
	}
	redisErr, isRedis := rueidis.IsRedisErr(err)
	if !isRedis {
		return false
	}
	msg := redisErr.Error()
	switch lower := strings.ToLower(msg); {
	case strings.Contains(msg, "already exists"):
		return true // loaded meanwhile by another call
	case strings.HasPrefix(msg, "NOPERM"), strings.Contains(lower, "unknown command"), strings.Contains(lower, "unknown subcommand"),
		strings.Contains(lower, "error registering functions"), strings.Contains(lower, "error compiling"):
		r.evalOnly.Store(true)
	}
	return false
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
// Redis sends before it starts one (Redis 7.0-7.4 word them so). An error
// the function itself returned, such as a script's NOPERM naming the
// command it may not run, is fnRan.
func notRun(resp rueidis.RedisResult) refusal {
	err, ok := rueidis.IsRedisErr(resp.Error())
	if !ok {
		return fnRan
	}
	msg := err.Error()
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(msg, "Function not found"):
		return fnMissing
	case strings.Contains(lower, "unknown command") && strings.Contains(lower, "fcall"),
		strings.HasPrefix(msg, "NOPERM") && strings.Contains(lower, "'fcall'"):
		return fnRefused
	case strings.HasPrefix(msg, "OOM"):
		return fnNoMemory
	}
	return fnRan
}
