package lua

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// An uncontended Unlock (release.lua's plain part) that cannot write the
// fencing counter, a key of another kind being there, fails before it
// changes anything: the lock hash as it was, no tombstone, no latch. (Run as
// a script and as a function.)
func TestPlainReleaseFailsBeforeWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Owned(t)
	keys := []string{"{l}", "{l}:latch", "{l}:queue", "{l}:waiters", "{l}:fence", "{l}:seq", "{l}:gone"}
	args := []string{"c:1", "30000", "PUBLISH", "{l}:unlock", "", "6000", "65", "", "1000", "6000", "{l}:to:", "0", "0"}
	calls := map[string][]string{"EVAL": append([]string{"EVAL", releaseScriptSrc, "7"}, append(keys, args...)...)}
	if _, err := srv.Do(ctx, "FUNCTION", "LOAD", "REPLACE", Release.lib.code); err == nil {
		calls["FCALL"] = append([]string{"FCALL", Release.fn, "7"}, append(keys, args...)...)
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			for _, cmd := range [][]string{{"FLUSHALL"}, {"HSET", "{l}", "c:1", "1", "t", "5"}, {"PEXPIRE", "{l}", "30000"},
				{"HSET", "{l}:fence", "not", "a-counter"}} {
				if _, err := srv.Do(ctx, cmd...); err != nil {
					t.Fatal(err)
				}
			}
			hash := func() map[string]string {
				t.Helper()
				m, err := srv.Do(ctx, "HGETALL", "{l}")
				if err != nil {
					t.Fatal(err)
				}
				h, err := m.AsStrMap()
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			before := hash()
			if _, err := srv.Do(ctx, call...); err == nil {
				t.Fatal("the release succeeded with a hash where the fencing counter goes")
			}
			if after := hash(); len(before) == 0 || !maps.Equal(after, before) {
				t.Fatalf("lock hash %v after the failed release, %v before", after, before)
			}
			for _, k := range []string{"{l}:latch", "{l}:gone"} {
				m, err := srv.Do(ctx, "EXISTS", k)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := m.AsInt64(); err != nil || n != 0 {
					t.Errorf("%s written by the failed release (%d, %v)", k, n, err)
				}
			}
		})
	}
}
