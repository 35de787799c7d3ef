package chaos_test

// Fuzz tests of names: any string given to rlock.Client.Mutex or
// semaphore.New either is refused with ErrInvalidName (exactly when it breaks
// the documented rules) or makes a clean round trip that leaves no lock
// behind, touching only keys under the name's own stem. The seed corpus runs
// with go test; fuzz with
//
//	go test -run '^$' -fuzz FuzzMutexName ./chaos
//	go test -run '^$' -fuzz FuzzSemaphoreName ./chaos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

var nameSeeds = []string{
	"a", "orders:42", "ünïcödé", "日本語", "🔒", "*", "?", "[a-z]", " ", "a b", `\`, `"quoted"`,
	":", "::", "a:{", "}", "{}", "{", "a\x00", "\xff", "\t", "\u2028", "\u00a0", "\u200b",
	strings.Repeat("x", rlock.MaxNameLength), strings.Repeat("x", rlock.MaxNameLength+1),
	strings.Repeat("é", rlock.MaxNameLength/2), strings.Repeat("é", rlock.MaxNameLength/2+1),
}

// validName is the documented rule, written independently of the library.
func validName(name string) bool {
	return name != "" && len(name) <= rlock.MaxNameLength && utf8.ValidString(name) &&
		!strings.ContainsAny(name, "{}") && strings.IndexFunc(name, unicode.IsControl) < 0
}

type fuzzEnv struct {
	srv    *redistest.Server
	c      *rlock.Client
	prefix string
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	srv := redistest.New(f)
	prefix := strings.TrimSuffix(redistest.KeyPrefix(f), ":")
	c, err := rlock.New(redistest.Client(f, srv), rlock.WithKeyPrefix(prefix))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	for _, s := range nameSeeds {
		f.Add(s)
	}
	for _, s := range badNames {
		f.Add(s)
	}
	return &fuzzEnv{srv: srv, c: c, prefix: prefix}
}

// checkKeys fails unless every key created since before lives under the
// name's stem, and none is left that holds anything: only counters (strings)
// and, for a semaphore, its state hash may stay.
func (e *fuzzEnv) checkKeys(t *testing.T, ctx context.Context, name string, before map[string]redistest.KeyState, allowHash string) {
	t.Helper()
	after, err := e.srv.Snapshot(ctx, e.prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	stem := e.prefix + ":{" + name + "}"
	for k, st := range after {
		if old, ok := before[k]; ok && old == st {
			continue
		}
		if !strings.HasPrefix(k, stem) {
			t.Errorf("key %q written outside the name's stem %q", k, stem)
			continue
		}
		if st.HasExpiry {
			continue // a release latch: expires by itself
		}
		typ, err := e.srv.Do(ctx, "TYPE", k)
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := typ.ToString()
		if ts != "string" && !(ts == "hash" && k == allowHash) {
			t.Errorf("key %q (%s) left behind by a clean round trip", k, ts)
		}
	}
}

func FuzzMutexName(f *testing.F) {
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		before, err := e.srv.Snapshot(ctx, e.prefix+"*")
		if err != nil {
			t.Fatal(err)
		}
		m := e.c.Mutex(name)
		if m.Name() != name {
			t.Fatalf("Name() = %q, want %q", m.Name(), name)
		}
		_ = m.String()
		lockCtx, err := m.TryLock(ctx)
		if !validName(name) {
			if !errors.Is(err, rlock.ErrInvalidName) {
				t.Fatalf("TryLock(%q): want ErrInvalidName, got %v", name, err)
			}
			if err := m.Unlock(ctx); !errors.Is(err, rlock.ErrInvalidName) {
				t.Fatalf("Unlock(%q): want ErrInvalidName, got %v", name, err)
			}
			e.checkKeys(t, ctx, name, before, "")
			return
		}
		if err != nil {
			t.Fatalf("TryLock(%q): %v", name, err)
		}
		if tok, err := m.Token(lockCtx); err != nil || tok == 0 {
			t.Fatalf("Token: %d, %v", tok, err)
		}
		if locked, err := m.IsLocked(ctx); err != nil || !locked {
			t.Fatalf("IsLocked after TryLock: %v, %v", locked, err)
		}
		if err := m.Unlock(lockCtx); err != nil {
			t.Fatalf("Unlock(%q): %v", name, err)
		}
		if locked, err := m.IsLocked(ctx); err != nil || locked {
			t.Fatalf("IsLocked after Unlock: %v, %v", locked, err)
		}
		e.checkKeys(t, ctx, name, before, "")
	})
}

func FuzzSemaphoreName(f *testing.F) {
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		before, err := e.srv.Snapshot(ctx, e.prefix+"*")
		if err != nil {
			t.Fatal(err)
		}
		s := semaphore.New(e.c, name)
		_ = s.String()
		_, err = s.TrySetLimit(ctx, 1)
		if !validName(name) {
			if !errors.Is(err, semaphore.ErrInvalidName) {
				t.Fatalf("TrySetLimit(%q): want ErrInvalidName, got %v", name, err)
			}
			if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, semaphore.ErrInvalidName) {
				t.Fatalf("TryAcquire(%q): want ErrInvalidName, got %v", name, err)
			}
			e.checkKeys(t, ctx, name, before, "")
			return
		}
		if err != nil {
			t.Fatalf("TrySetLimit(%q): %v", name, err)
		}
		permitCtx, err := s.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", name, err)
		}
		if err := s.Release(permitCtx); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		st, err := s.State(ctx)
		if err != nil || st.Held != 0 || st.Queued != 0 || st.Limit != 1 {
			t.Fatalf("State after a round trip: %+v, %v", st, err)
		}
		e.checkKeys(t, ctx, name, before, e.prefix+":{"+name+"}:sem")
	})
}
