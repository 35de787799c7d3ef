package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// TestACLSweepLeavesNothing revokes, one at a time, every command of the
// README's rule that a lock's scripts run, and takes and gives back each
// kind of lock uncontended under it: whatever is refused is refused with
// ErrPermission naming the command; no key of the lock is left without an
// expiry; and, the command granted again, another Client takes the lock at
// once unless a release was refused (nothing was left held, queued or handed
// to no one; a refused release leaves the hold to its lease, as its error
// says).
func TestACLSweepLeavesNothing(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		take func(ctx context.Context, c *rlock.Client, name string) (release func(context.Context) error, err error)
	}{
		{"mutex", func(ctx context.Context, c *rlock.Client, name string) (func(context.Context) error, error) {
			lc, err := c.Mutex(name).Lock(ctx)
			return func(context.Context) error { return c.Mutex(name).Unlock(lc) }, err
		}},
		{"rwmutex-read", func(ctx context.Context, c *rlock.Client, name string) (func(context.Context) error, error) {
			lc, err := c.RWMutex(name).RLock(ctx)
			return func(context.Context) error { return c.RWMutex(name).RUnlock(lc) }, err
		}},
		{"rwmutex-write", func(ctx context.Context, c *rlock.Client, name string) (func(context.Context) error, error) {
			lc, err := c.RWMutex(name).Lock(ctx)
			return func(context.Context) error { return c.RWMutex(name).Unlock(lc) }, err
		}},
		{"semaphore", func(ctx context.Context, c *rlock.Client, name string) (func(context.Context) error, error) {
			s := semaphore.New(c, name, semaphore.WithLimit(1))
			pc, err := s.Acquire(ctx, 1)
			return func(context.Context) error { return s.Release(pc) }, err
		}},
		// A lease of more than one permit, which the counts hash counts.
		{"semaphore-two", func(ctx context.Context, c *rlock.Client, name string) (func(context.Context) error, error) {
			s := semaphore.New(c, name, semaphore.WithLimit(3))
			pc, err := s.Acquire(ctx, 2)
			return func(context.Context) error { return s.Release(pc) }, err
		}},
	}
	// The keyed commands of the rule and TIME; EVALSHA and EVAL refuse a
	// script before it runs, the pub/sub commands only a wait.
	commands := strings.Fields("TIME EXISTS GET SET DEL INCR INCRBY PEXPIRE PEXPIREAT PERSIST PTTL " +
		"HGET HMGET HSET HDEL HEXISTS HINCRBY HKEYS ZADD ZCARD ZRANGE ZRANGEBYSCORE ZREM ZSCORE PUBLISH")
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin, user, other, revoke := refusedClients(t, ctx)
			grant := func(cmd string) {
				t.Helper()
				if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", aclUserName, "+"+strings.ToLower(cmd)).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			for _, cmd := range commands {
				name := "sweep-" + kind.name + "-" + strings.ToLower(cmd)
				revoke(cmd)
				callCtx, cancelCall := context.WithTimeout(ctx, 5*time.Second)
				release, err := kind.take(callCtx, user, name)
				refusedRelease := false
				if err != nil {
					refused(t, kind.name+" take", err, cmd)
				} else if err = release(callCtx); err != nil {
					refused(t, kind.name+" release", err, cmd)
					refusedRelease = true
				}
				cancelCall()
				if keys := lockKeysWithoutExpiry(t, ctx, admin, name); len(keys) > 0 {
					t.Errorf("%s with %s revoked: keys left without an expiry: %q", kind.name, cmd, keys)
				}
				grant(cmd)
				if refusedRelease {
					// The hold was given up (the error says so) and stays in
					// Redis until its lease ends.
					continue
				}
				tryCtx, cancelTry := context.WithTimeout(ctx, time.Second)
				if rel, err := kind.take(tryCtx, other, name); err != nil {
					t.Errorf("%s with %s revoked, then granted: another Client's take: %v", kind.name, cmd, err)
				} else if err := rel(ctx); err != nil {
					t.Errorf("%s: another Client's release: %v", kind.name, err)
				}
				cancelTry()
			}
		})
	}
}

// refused checks err, the error of a call whose user was refused cmd: it
// must be ErrPermission naming cmd.
func refused(t *testing.T, what string, err error, cmd string) {
	t.Helper()
	if !errors.Is(err, rlock.ErrPermission) {
		t.Errorf("%s with %s revoked: %v; want ErrPermission", what, cmd, err)
		return
	}
	checkRefused(t, what, err, cmd)
}
