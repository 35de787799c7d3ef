package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// TestACLRefusedReleaseBesideLapsedReader revokes, one at a time, each
// command of the README's rule and releases an RWMutex hold (read and write,
// the last level and one of two) while a reader whose lease ran out is still
// in the readers zset: the path on which a release reclaims that reader
// before it reads its own hold, and so checks every command up front (the
// uncontended release checks only its own writes). Whatever is refused is
// refused with ErrPermission naming the command, and nothing of the lock
// changed.
func TestACLRefusedReleaseBesideLapsedReader(t *testing.T) {
	t.Parallel()
	commands := strings.Fields("NONE TIME EXISTS GET SET DEL PEXPIRE PEXPIREAT PTTL " +
		"HGET HMGET HSET HDEL HEXISTS HINCRBY ZADD ZCARD ZRANGE ZRANGEBYSCORE ZREM ZSCORE PUBLISH")
	for _, mode := range []string{"read", "write", "read-reentered", "write-reentered"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin, user, _, revoke := refusedClients(t, ctx)
			for _, cmd := range commands {
				name := "lapsed-" + mode + "-" + strings.ToLower(cmd)
				release, rest := takeForRelease(t, ctx, user.RWMutex(name), mode)
				// A reader whose lease ran out, still in the zset.
				if err := admin.Do(ctx, admin.B().Zadd().Key("rlock:{"+name+"}:rw:r").ScoreMember().ScoreMember(1, "ghost:1").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				if err := admin.Do(ctx, admin.B().Hset().Key("rlock:{"+name+"}:rw:r:n").FieldValue().FieldValue("ghost:1", "1").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				if cmd != "NONE" {
					revoke(cmd)
				}
				before := lockKeysDump(t, ctx, admin, name)
				err := release()
				after := lockKeysDump(t, ctx, admin, name)
				if err == nil && cmd == "NONE" {
					// With every right, the release took the path this test
					// is about: it reclaimed the lapsed reader.
					if score, _ := admin.Do(ctx, admin.B().Zscore().Key("rlock:{"+name+"}:rw:r").Member("ghost:1").Build()).ToString(); score != "" {
						t.Errorf("%s: the lapsed reader is still in the readers zset after a release (score %s)", mode, score)
					}
				}
				if err != nil {
					if !errors.Is(err, rlock.ErrPermission) || !strings.Contains(err.Error(), "may not run "+cmd) {
						t.Errorf("%s with %s revoked: %v; want ErrPermission naming %s", mode, cmd, err, cmd)
					}
					if before != after && !strings.Contains(err.Error(), "nothing was handed") {
						t.Errorf("%s with %s revoked: refused, yet the lock changed\n%s\n->\n%s", mode, cmd, before, after)
					}
				}
				if cmd != "NONE" {
					if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", aclUserName, "+"+strings.ToLower(cmd)).Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				rest()
			}
		})
	}
}

// takeForRelease takes rw in mode (read or write; "-reentered": twice) and
// returns the release of the level taken last, and rest, which gives back
// the level taken first, if any (its outcome is not this test's).
func takeForRelease(t *testing.T, ctx context.Context, rw *rlock.RWMutex, mode string) (release func() error, rest func()) {
	t.Helper()
	take, give := rw.Lock, rw.Unlock
	if strings.HasPrefix(mode, "read") {
		take, give = rw.RLock, rw.RUnlock
	}
	outer, err := take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(mode, "-reentered") {
		return func() error { return give(outer) }, func() {}
	}
	inner, err := take(outer)
	if err != nil {
		t.Fatal(err)
	}
	return func() error { return give(inner) }, func() { _ = give(outer) }
}

// lockKeysDump is every key of the lock name with its value and expiry, as
// one string to compare.
func lockKeysDump(t *testing.T, ctx context.Context, admin rueidis.Client, name string) string {
	t.Helper()
	keys, err := admin.Do(ctx, admin.B().Keys().Pattern("rlock:{"+name+"}*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		dump, _ := admin.Do(ctx, admin.B().Dump().Key(k).Build()).ToString()
		at, _ := admin.Do(ctx, admin.B().Pexpiretime().Key(k).Build()).AsInt64()
		fmt.Fprintf(&b, "%s=%x@%d\n", k, dump, at)
	}
	return b.String()
}
