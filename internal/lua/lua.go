// Package lua holds the Lua scripts that make every lock operation atomic in Redis.
//
// Each script is a .lua file in this directory whose opening comment states its
// KEYS, ARGV and return values. The files are embedded at build time and wrapped
// once in a rueidis.Lua, which sends EVALSHA and falls back to EVAL when the
// server does not know the script yet (after a restart or SCRIPT FLUSH).
package lua

import (
	_ "embed"
	"strings"

	"github.com/redis/rueidis"
)

var (
	//go:embed publish_lib.lua
	publishLibSrc string
	//go:embed queue_lib.lua
	queueLibOnly string
	//go:embed fence_lib.lua
	fenceLibOnly string
	//go:embed queue_inspect_lib.lua
	queueInspectLibOnly string
	//go:embed mutex_lib.lua
	mutexLibOnly string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed forceunlock.lua
	forceUnlockSrc string
	//go:embed abandon.lua
	abandonSrc string
	//go:embed quorum_acquire.lua
	quorumAcquireSrc string
	//go:embed quorum_leave.lua
	quorumLeaveSrc string

	//go:embed rw_lib.lua
	rwLibOnly string
	//go:embed rw_acquire.lua
	rwAcquireSrc string
	//go:embed rw_release.lua
	rwReleaseSrc string
	//go:embed rw_abandon.lua
	rwAbandonSrc string
	//go:embed rw_renew.lua
	rwRenewSrc string

	//go:embed sem_lib.lua
	semLibOnly string
	//go:embed sem_acquire.lua
	semAcquireSrc string
	//go:embed sem_release.lua
	semReleaseSrc string
	//go:embed sem_abandon.lua
	semAbandonSrc string
	//go:embed sem_limit.lua
	semLimitSrc string
	//go:embed sem_renew.lua
	semRenewSrc string
)

// The libraries prepended to the scripts, so that every script stays a single
// self-contained EVAL: every lock kind waits in the queue of queue_lib.lua,
// the Mutex and RWMutex fence with fence_lib.lua, and all of them publish
// through publish_lib.lua.
var (
	queueLibSrc = publishLibSrc + queueLibOnly
	fenceLibSrc = publishLibSrc + fenceLibOnly
	mutexLibSrc = queueLibSrc + fenceLibOnly + mutexLibOnly
	rwLibSrc    = queueLibSrc + fenceLibOnly + rwLibOnly
	semLibSrc   = queueLibSrc + semLibOnly
)

// script is the source of a script as EVAL runs it: the helpers of libs
// that body can reach (see shake), then body, which begins its call
// (script_begin, publish_lib.lua).
func script(libs, body string) string { return contended(libs, body) }

const scriptBegin = "script_begin()\n"

// contendedMark is a line of a script below which only its contended paths
// run: the helpers that only those paths use are made there, so that a call
// that returns above it (an uncontended Lock or Unlock) never makes them.
// Redis runs a script's whole source at every call, and each function it
// defines is a closure made anew, used or not: about 0.17us each (an empty
// script took 2.4-2.7us with redis-benchmark, one behind the Mutex's 38
// library functions 8.7-10.9us).
const contendedMark = "--@contended\n"

// plainMark ends the first part of a script that writes its common case
// plainly (acquire.lua's and release.lua's): run by EVAL, the part runs
// before script_begin and before any helper is made but the few it calls,
// each of them small (TestPlainPartsMakeFewHelpers). (As a Redis function it
// runs after script_begin, every helper made already, which it does not
// need.) A Lock and Unlock on a lock
// nobody else wants then cost Redis 19% fewer instructions than through the
// helpers (bench/scriptcost, docs/benchmarks.md); the rest of the script is
// the general path, which the first part falls through to, having written
// nothing, whenever its case does not hold.
const plainMark = "--@helpers\n"

// contended is body, begun by script_begin (after its plain part, if it has
// one: see plainMark), with the helpers of lib that its part above its
// contendedMark can reach put before it, and those that only the part below
// can reach put at the mark.
func contended(lib, body string) string {
	var parts []string
	if plain, rest, ok := strings.Cut(body, plainMark); ok {
		parts, body = append(parts, plain), rest
	}
	if above, below, ok := strings.Cut(body, contendedMark); ok {
		return shake(lib, append(parts, scriptBegin+above, below)...)
	}
	return shake(lib, append(parts, scriptBegin+body)...)
}

// The Mutex's acquire and release scripts: their uncontended paths above
// their plainMark, the rest of what they run without the queue above their
// contendedMark.
var (
	acquireScriptSrc = contended(mutexLibSrc, acquireSrc)
	releaseScriptSrc = contended(mutexLibSrc, releaseSrc)
)

// Scripts of the reentrant Mutex. Those that touch its waiter queue share the
// helpers of mutex_lib.lua. All but Renew (sent in batches, see Pipelined)
// are functions of one library (see functions.go).
var (
	Acquire, Release, ForceUnlock, Abandon, QuorumAcquire, QuorumLeave = mutexScripts()

	Renew = newPipelined(script(publishLibSrc, renewSrc))
)

// mutexScripts makes the Mutex's function library. QuorumAcquire is one
// master's vote for a quorum lock (rlock.Quorum), whose holds the Mutex's
// Release, Renew and Abandon serve; QuorumLeave gives up a quorum Lock
// call's place at the gate.
func mutexScripts() (acquire, release, forceUnlock, abandon, quorumAcquire, quorumLeave *Script) {
	s := newLibrary("mutex", mutexLibSrc,
		scriptBody{"acquire", acquireSrc, acquireScriptSrc},
		scriptBody{"release", releaseSrc, releaseScriptSrc},
		scriptBody{"forceunlock", forceUnlockSrc, script(mutexLibSrc, forceUnlockSrc)},
		scriptBody{"abandon", abandonSrc, script(mutexLibSrc, abandonSrc)},
		scriptBody{"quorum_acquire", quorumAcquireSrc, script(publishLibSrc, quorumAcquireSrc)},
		scriptBody{"quorum_leave", quorumLeaveSrc, script(publishLibSrc, quorumLeaveSrc)})
	return s[0], s[1], s[2], s[3], s[4], s[5]
}

// Scripts of the RWMutex. All but RWRenew share the helpers of rw_lib.lua,
// as functions of one library. Write holds are renewed by Renew (the writer
// hash is a Mutex-shaped hash).
var (
	RWAcquire, RWRelease, RWAbandon = rwScripts()

	RWRenew = newPipelined(script(fenceLibSrc, rwRenewSrc))
)

func rwScripts() (acquire, release, abandon *Script) {
	s := newLibrary("rw", rwLibSrc,
		scriptBody{"acquire", rwAcquireSrc, script(rwLibSrc, rwAcquireSrc)},
		scriptBody{"release", rwReleaseSrc, script(rwLibSrc, rwReleaseSrc)},
		scriptBody{"abandon", rwAbandonSrc, script(rwLibSrc, rwAbandonSrc)})
	return s[0], s[1], s[2]
}

// Scripts of the semaphore. All but SemRenew share the helpers of
// sem_lib.lua, as functions of one library.
var (
	SemAcquire, SemRelease, SemAbandon, SemLimit = semScripts()

	SemRenew = newPipelined(script(publishLibSrc, semRenewSrc))
)

func semScripts() (acquire, release, abandon, limit *Script) {
	s := newLibrary("sem", semLibSrc,
		scriptBody{"acquire", semAcquireSrc, script(semLibSrc, semAcquireSrc)},
		scriptBody{"release", semReleaseSrc, script(semLibSrc, semReleaseSrc)},
		scriptBody{"abandon", semAbandonSrc, script(semLibSrc, semAbandonSrc)},
		scriptBody{"limit", semLimitSrc, script(semLibSrc, semLimitSrc)})
	return s[0], s[1], s[2], s[3]
}

//go:embed probe.lua
var probeSrc string

var (
	//go:embed inspect.lua
	inspectSrc string
	//go:embed rw_inspect.lua
	rwInspectSrc string
	//go:embed sem_inspect.lua
	semInspectSrc string
)

// Read-only scripts that report a lock as it stands (holders, queue), one
// round trip each, for the Inspect methods. They read the queue with
// queue_inspect_lib.lua (and change nothing).
var (
	Inspect    = rueidis.NewLuaScript(script(queueLibSrc+queueInspectLibOnly, inspectSrc))
	RWInspect  = rueidis.NewLuaScript(script(queueLibSrc+queueInspectLibOnly, rwInspectSrc))
	SemInspect = rueidis.NewLuaScript(script(queueLibSrc+queueInspectLibOnly, semInspectSrc))
)

// Probe checks that the current ACL user may run every command the scripts and
// clients of the module run, on representative keys and channels (see
// probe.lua). It returns the denied command names; it touches no key.
var Probe = rueidis.NewLuaScript(probeSrc)
