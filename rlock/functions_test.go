package rlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// WithRedisFunctions(true) runs a Mutex's Lock and Unlock as functions of
// the library the first call loaded; by default, as with
// WithRedisFunctions(false), they run by EVALSHA and nothing is loaded.
func TestMutexScriptsRunAsFunctions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []rlock.Option
		on   bool
	}{
		{"on", []rlock.Option{rlock.WithRedisFunctions(true)}, true},
		{"off", []rlock.Option{rlock.WithRedisFunctions(false)}, false},
		{"default", nil, false},
	} {
		on := tc.on
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := redistest.Owned(t)
			if _, err := srv.Do(ctx, "FUNCTION", "LIST"); err != nil {
				t.Skipf("no Redis functions on this server: %v", err)
			}
			c, err := rlock.New(redistest.Client(t, srv), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			m := c.Mutex("fn")
			for range 3 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Unlock(l); err != nil {
					t.Fatal(err)
				}
			}
			st, err := srv.CommandStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			libs, err := srv.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", "relock_*")
			if err != nil {
				t.Fatal(err)
			}
			n, _ := libs.ToArray()
			// On: the first FCALL finds no library, loads it, and calls again.
			if on && (st["fcall"] != 7 || st["function|load"] != 1 || len(n) != 1) {
				t.Fatalf("on: %d FCALLs, %d FUNCTION LOADs, %d relock libraries; want 7, 1, 1", st["fcall"], st["function|load"], len(n))
			}
			if !on && (st["fcall"] != 0 || st["function|load"] != 0 || len(n) != 0 || st["evalsha"] < 6) {
				t.Fatalf("off: %d FCALLs, %d FUNCTION LOADs, %d relock libraries, %d EVALSHAs; want 0, 0, 0, 6",
					st["fcall"], st["function|load"], len(n), st["evalsha"])
			}
		})
	}
}

// A Client WithRedisFunctions(true) under the README's least-privilege
// rules, which do not grant functions, runs its scripts by EVALSHA: the probe
// of New finds the rights missing, so nothing is refused. With FCALL and
// FUNCTION LOAD added they run as functions, with nothing else denied.
func TestACLWithFunctions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers := redistest.NewN(t, 2) // without the rights, and with them
	for _, srv := range servers {
		if _, err := srv.Do(ctx, "FUNCTION", "LIST"); err != nil {
			t.Skipf("no Redis functions on this server: %v", err)
		}
	}
	srv := servers[0]
	newRC := func() rueidis.Client { return redistest.Client(t, srv, userOption) }
	setACLUser(t, ctx, srv, aclRules)
	a, b := aclClients(t, newRC, rlock.WithRedisFunctions(true))
	aclWorkload(t, ctx, redistest.Client(t, srv), a, b)
	checkNoDenials(t, ctx, srv, "command cluster|slots", "command client|setinfo")
	if st, err := srv.CommandStats(ctx); err != nil || st["fcall"] != 0 || st["evalsha"] == 0 {
		t.Fatalf("without the rights: %d FCALLs, %d EVALSHAs (%v); want none and some", st["fcall"], st["evalsha"], err)
	}

	srv = servers[1]
	setACLUser(t, ctx, srv, aclRules, strings.Fields(aclFunctionRules)...)
	a, b = aclClients(t, newRC, rlock.WithRedisFunctions(true))
	aclWorkload(t, ctx, redistest.Client(t, srv), a, b)
	checkNoDenials(t, ctx, srv, "command cluster|slots", "command client|setinfo")
	st, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st["fcall"] == 0 {
		t.Fatalf("no FCALL under the ACL user with %q", aclFunctionRules)
	}
	// The workload runs every lock kind: each loaded its library.
	msg, err := srv.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", "relock_*")
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := msg.ToArray()
	var names []string
	for _, lib := range libs {
		fields, _ := lib.AsMap()
		name := fields["library_name"]
		s, _ := name.ToString()
		names = append(names, s)
	}
	for _, kind := range []string{"relock_mutex_", "relock_rw_", "relock_sem_"} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, kind) }) {
			t.Errorf("no %s* library loaded under the ACL user; loaded: %v", kind, names)
		}
	}
}
