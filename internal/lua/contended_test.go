package lua

import (
	"strings"
	"testing"
)

// A script carries the helpers its parts can reach, each before the first
// part that can reach it, in the library's order; everything else at the
// library's top level comes first, whole.
func TestShake(t *testing.T) {
	a := "local function a()\n  return K\nend\n"
	b := "local function b()\n  return a() -- c()\nend\n"
	c := "local function c()\n  return 'd()'\nend\n"
	d := "local function d()\n\n  return c()\nend\n"
	e := "local function e()\n  return 1\nend\n"
	hook := "-- a hook\nhooks[#hooks + 1] = function()\n  return e()\nend\n"
	lib := "local K = 1\n" + a + b + c + d + e + hook
	got := shake(lib, "return b()\n", "return d()\n")
	want := "local K = 1\n" + a + b + e + hook + "return b()\n" + c + d + "return d()\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// A helper without the shape: the library goes whole, first.
	for _, odd := range []string{"local function x()\n  return 1\n", "local function x() return 1 end\nlocal y = x()\nend\n",
		"local function x()\nreturn 1\nend\n"} {
		if got := shake(odd, "return 2\n"); got != odd+"return 2\n" {
			t.Fatalf("%q shaken: %q", odd, got)
		}
	}
}

// Every library has the shape shake relies on, and cuts into units that put
// back together give it unchanged: no script is sent with its whole library
// because a helper lost its closing line.
func TestShakeKeepsShape(t *testing.T) {
	for name, lib := range map[string]string{"publish_lib.lua": publishLibSrc, "fence_lib.lua": fenceLibOnly,
		"queue_lib.lua": queueLibOnly, "mutex_lib.lua": mutexLibOnly, "rw_lib.lua": rwLibOnly,
		"sem_lib.lua": semLibOnly, "queue_inspect_lib.lua": queueInspectLibOnly} {
		units, ok := splitLibrary(lib)
		if !ok {
			t.Fatalf("%s: a helper has no closing \"end\" line", name)
		}
		var back strings.Builder
		helpers := 0
		for _, u := range units {
			back.WriteString(u.text)
			if u.name != "" {
				helpers++
			}
		}
		if back.String() != lib {
			t.Fatalf("%s does not come back whole from its units", name)
		}
		if want := strings.Count(lib, "\nlocal function ") + map[bool]int{true: 1}[strings.HasPrefix(lib, "local function ")]; helpers != want {
			t.Fatalf("%s: %d helpers found, want %d", name, helpers, want)
		}
	}
}

// Names in comments and string literals are not calls.
func TestIdentifiers(t *testing.T) {
	got := identifiers("local x = f('g(') -- h()\nreturn \"i\\\"j\" .. k --[[ l ]] .. m\n")
	for _, name := range []string{"local", "x", "f", "return", "k", "m"} {
		if !got[name] {
			t.Errorf("%s not found", name)
		}
	}
	for _, name := range []string{"g", "h", "i", "j", "l"} {
		if got[name] {
			t.Errorf("%s found, but it is in a comment or a string", name)
		}
	}
}

// The Mutex's acquire and release scripts each mark where their uncontended
// path ends, once, and make no queue function above it (the mark moved up
// or lost would quietly cost every uncontended call the queue library).
func TestMutexScriptsMarkTheirUncontendedPath(t *testing.T) {
	for name, body := range map[string]string{"acquire.lua": acquireSrc, "release.lua": releaseSrc} {
		if n := strings.Count(body, contendedMark); n != 1 {
			t.Fatalf("%s has %d contended marks, want 1", name, n)
		}
		above := body[:strings.Index(body, contendedMark)]
		for _, line := range strings.Split(above, "\n") {
			if i := strings.Index(line, "--"); i >= 0 {
				line = line[:i]
			}
			if strings.Contains(line, "queue_") || strings.Contains(line, "mutex_") {
				t.Errorf("%s calls the queue or Mutex library above its mark: %q", name, strings.TrimSpace(line))
			}
		}
	}
	for name, body := range map[string]string{"Acquire": acquireSrc, "Release": releaseSrc} {
		above, _, _ := strings.Cut(body, contendedMark)
		src := shake(mutexLibSrc, scriptBegin+above)
		if strings.Contains(src, "local function queue_") || strings.Contains(src, "local function mutex_") {
			t.Errorf("%s makes a queue or Mutex helper on its uncontended path", name)
		}
	}
	for name, src := range map[string]string{"Acquire": acquireScriptSrc, "Release": releaseScriptSrc} {
		if strings.Contains(src, contendedMark) {
			t.Errorf("%s keeps its mark", name)
		}
		if !strings.Contains(src, "local function queue_first(") || !strings.Contains(src, "local function mutex_handoff(") {
			t.Errorf("%s lacks the helpers of its contended path", name)
		}
	}
}

// The semaphore's acquire and release scripts, and the RWMutex's release,
// mark where the path of a call that finds no one queued ends, once: above
// it no helper of the queue's serving (or joining) is made.
func TestSemAndRWScriptsMarkTheirUncontendedPath(t *testing.T) {
	for name, s := range map[string]struct{ lib, body, contended string }{
		"sem_acquire.lua": {semLibSrc, semAcquireSrc, "sem_handoff"},
		"sem_release.lua": {semLibSrc, semReleaseSrc, "sem_handoff"},
		"rw_release.lua":  {rwLibSrc, rwReleaseSrc, "rw_serve"},
	} {
		if n := strings.Count(s.body, contendedMark); n != 1 {
			t.Fatalf("%s has %d contended marks, want 1", name, n)
		}
		above, _, _ := strings.Cut(s.body, contendedMark)
		src := shake(s.lib, scriptBegin+above)
		for _, helper := range []string{"queue_serve", "queue_enqueue", "queue_entry", s.contended} {
			if strings.Contains(src, "local function "+helper+"(") {
				t.Errorf("%s makes %s above its mark", name, helper)
			}
		}
		if whole := contended(s.lib, s.body); !strings.Contains(whole, "local function "+s.contended+"(") {
			t.Errorf("%s lacks the helpers of its other paths", name)
		}
	}
}

// The libraries put at a script's contendedMark are made after the script's
// script_begin has run when the script runs by EVAL: one that registered a
// per-call hook (script_begins) would have it run as a function and not by
// EVAL.
func TestContendedLibrariesHaveNoCallHooks(t *testing.T) {
	for name, lib := range map[string]string{"queue_lib.lua": queueLibOnly, "mutex_lib.lua": mutexLibOnly} {
		if strings.Contains(lib, "script_begins[") {
			t.Errorf("%s registers a script_begins hook, but is made after script_begin in acquire and release", name)
		}
	}
}

// A helper put at a script's contendedMark sees the locals its part above
// the mark declared, where the whole library before the script saw only the
// library's: none may take the name of a library helper or variable.
func TestContendedPartDeclaresNoLibraryName(t *testing.T) {
	library := map[string]bool{}
	for _, u := range mustSplit(t, mutexLibSrc+rwLibOnly+semLibOnly) {
		if u.name != "" {
			library[u.name] = true
			continue
		}
		for _, line := range strings.Split(u.text, "\n") {
			if decl, ok := strings.CutPrefix(line, "local "); ok {
				names, _, _ := strings.Cut(decl, "=")
				for _, n := range strings.Split(names, ",") {
					library[strings.TrimSpace(n)] = true
				}
			}
		}
	}
	for name, body := range map[string]string{"acquire.lua": acquireSrc, "release.lua": releaseSrc, "rw_acquire.lua": rwAcquireSrc,
		"sem_acquire.lua": semAcquireSrc, "sem_release.lua": semReleaseSrc, "rw_release.lua": rwReleaseSrc} {
		above, _, _ := strings.Cut(body, contendedMark)
		for _, line := range strings.Split(above, "\n") {
			decl, ok := strings.CutPrefix(strings.TrimSpace(line), "local ")
			if !ok {
				continue
			}
			decl = strings.TrimPrefix(decl, "function ")
			names, _, _ := strings.Cut(decl, "=")
			names, _, _ = strings.Cut(names, "(")
			for _, n := range strings.Split(names, ",") {
				if library[strings.TrimSpace(n)] {
					t.Errorf("%s declares %q above its mark, a name of the library", name, strings.TrimSpace(n))
				}
			}
		}
	}
}

func mustSplit(t *testing.T, lib string) []libUnit {
	t.Helper()
	units, ok := splitLibrary(lib)
	if !ok {
		t.Fatal("the library does not have the shape shake relies on")
	}
	return units
}

// The plain parts of acquire.lua and release.lua (above plainMark) make only
// the few small helpers they call, before script_begin when run by EVAL: one
// that reached, say, lock_call would make the helpers the plain part exists
// to avoid, and would run before script_begin set up what lock_call reads.
func TestPlainPartsMakeFewHelpers(t *testing.T) {
	allowed := map[string]bool{"lock_reply": true, "lock_last": true, "lock_bury": true, "fence_expiry": true, "fence_free": true}
	units := mustSplit(t, mutexLibSrc)
	byName := map[string]libUnit{}
	for _, u := range units {
		if u.name != "" {
			byName[u.name] = u
		}
	}
	for name, body := range map[string]string{"acquire.lua": acquireSrc, "release.lua": releaseSrc} {
		plain, rest, ok := strings.Cut(body, plainMark)
		if !ok || strings.Contains(rest, plainMark) {
			t.Fatalf("%s: want one plain mark", name)
		}
		reached := map[string]bool{}
		var reach func(refs map[string]bool)
		reach = func(refs map[string]bool) {
			for ref := range refs {
				if u, ok := byName[ref]; ok && !reached[ref] {
					reached[ref] = true
					reach(u.refs)
				}
			}
		}
		reach(identifiers(plain))
		if len(reached) == 0 {
			t.Errorf("%s: the plain part reaches no helper; the test's view of it is wrong", name)
		}
		for h := range reached {
			if !allowed[h] {
				t.Errorf("%s: the plain part reaches %s", name, h)
			}
		}
	}
	for name, src := range map[string]string{"Acquire": acquireScriptSrc, "Release": releaseScriptSrc} {
		plainAt := strings.Index(src, "if ARGV[")
		begin := strings.Index(src, "\n"+scriptBegin)
		if plainAt < 0 || begin < plainAt {
			t.Errorf("%s: the plain part does not come before script_begin", name)
		}
		if strings.Contains(src[:plainAt], "local function lock_call(") {
			t.Errorf("%s makes lock_call before its plain part", name)
		}
	}
}
