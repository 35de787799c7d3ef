package lua

import (
	"strings"
	"testing"
)

// The libraries only the contended paths use go at a script's contendedMark,
// after its uncontended path; a script without the mark gets them all first.
func TestWithContended(t *testing.T) {
	got := withContended("local a = 1\nif a then\n  return a\nend\n"+contendedMark+"return slow(a)\n",
		"local function fast() end\n", "local function slow(x) return x end\n")
	want := "local function fast() end\nlocal a = 1\nif a then\n  return a\nend\n" +
		"local function slow(x) return x end\nreturn slow(a)\n"
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := withContended("return 1\n", "F\n", "S\n"); got != "F\nS\nreturn 1\n" {
		t.Fatalf("without the mark: %q", got)
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
	for name, src := range map[string]string{"Acquire": acquireScriptSrc, "Release": releaseScriptSrc} {
		if strings.Contains(src, "\n"+contendedMark) {
			t.Errorf("%s keeps its mark", name)
		}
		if i, j := strings.Index(src, "local function queue_first("), strings.Index(src, "local function fence_tokens("); i < 0 || j < 0 || i < j {
			t.Errorf("%s: the queue library should come after the fence library", name)
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
