package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// lockKeysWithoutExpiry returns the keys of the lock name (under the default
// prefix) that have no expiry, found by SCAN as the admin client.
func lockKeysWithoutExpiry(t *testing.T, ctx context.Context, admin rueidis.Client, name string) []string {
	t.Helper()
	var keys []string
	cursor := uint64(0)
	for {
		e, err := admin.Do(ctx, admin.B().Scan().Cursor(cursor).Match("rlock:{"+name+"}*").Count(100).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	var forever []string
	for _, k := range keys {
		if ms, err := admin.Do(ctx, admin.B().Pttl().Key(k).Build()).AsInt64(); err == nil && ms == -1 {
			forever = append(forever, k)
		}
	}
	return forever
}

// checkRefused checks the error of a call refused one command: it matches
// ErrPermission and names the command.
func checkRefused(t *testing.T, what string, err error, cmd string) {
	t.Helper()
	t.Logf("%s with %s revoked: %v", what, cmd, err)
	if !errors.Is(err, rlock.ErrPermission) || !regexp.MustCompile(`may not run `+cmd+`\b`).MatchString(fmt.Sprint(err)) {
		t.Errorf("%s with %s revoked: %v; want ErrPermission naming %s", what, cmd, err, cmd)
	}
}

// TestACLRefusedLockLeavesNothing: a Lock of a Client whose ACL user was
// refused one of the commands of the README's rule (revoked after New, whose
// probe would have said so) fails with ErrPermission naming it, and leaves
// nothing behind: no key of the lock without an expiry, no hold of the failed
// owner (another Client takes the lock at once), no place in the queue.
func TestACLRefusedLockLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd       string
		contended bool // another Client holds the lock: the Lock queues
	}{
		{"SET", false}, {"HSET", false}, {"TIME", false}, {"TIME", true}, {"PEXPIRE", false}, {"EXISTS", false}, {"ZADD", true},
	} {
		name := strings.ToLower(tc.cmd)
		if tc.contended {
			name += "-contended"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv := redistest.Owned(t)
			setACLUser(t, ctx, srv, aclRules)
			admin := redistest.Client(t, srv)
			user, err := rlock.New(redistest.Client(t, srv, userOption))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = user.Close() })
			other, err := rlock.New(admin)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Close() })

			lock := "refused-" + name
			var held context.Context
			if tc.contended {
				if held, err = other.Mutex(lock).Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := srv.Do(ctx, "ACL", "SETUSER", aclUserName, "-"+strings.ToLower(tc.cmd)); err != nil {
				t.Fatal(err)
			}
			lockCtx, cancelLock := context.WithTimeout(ctx, 5*time.Second)
			_, err = user.Mutex(lock).Lock(lockCtx)
			cancelLock()
			checkRefused(t, "Lock", err, tc.cmd)
			if keys := lockKeysWithoutExpiry(t, ctx, admin, lock); len(keys) > 0 {
				t.Errorf("keys left without an expiry: %q", keys)
			}
			if held != nil {
				if err := other.Mutex(lock).Unlock(held); err != nil {
					t.Fatal(err)
				}
			}
			if lc, err := other.Mutex(lock).TryLock(ctx); err != nil {
				t.Errorf("TryLock by another Client after the refused Lock: %v", err)
			} else {
				_ = other.Mutex(lock).Unlock(lc)
			}
		})
	}
}

// TestACLRefusedHandOffHandsNothingOff: an Unlock whose hand-off to a queued
// waiter it may not make, or not announce (a command of the hand-off
// revoked, PUBLISH among them), does not grant the lock to that waiter
// behind its back: it fails with ErrPermission naming the command, the lock
// is left as it was (so the abandon the error reports is true), no key is
// left without an expiry, and the waiter takes the lock when the abandoned
// hold runs out.
func TestACLRefusedHandOffHandsNothingOff(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"PUBLISH", "ZREM", "DEL", "HSET", "ZADD"} {
		t.Run(strings.ToLower(cmd), func(t *testing.T) {
			t.Parallel()
			testACLRefusedHandOff(t, cmd)
		})
	}
}

func testACLRefusedHandOff(t *testing.T, cmd string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, user, other, revoke := refusedClients(t, ctx, rlock.WithWatchdogTimeout(aclLease))
	lock := "refused-handoff-" + strings.ToLower(cmd)
	key := "rlock:{" + lock + "}"
	held, err := user.Mutex(lock).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := lockAsync(ctx, other.Mutex(lock))
	eventually(t, 10*time.Second, "the waiter never queued", func() bool {
		n, err := admin.Do(ctx, admin.B().Zcard().Key(key+":queue").Build()).AsInt64()
		return err == nil && n > 0
	})
	before, err := hkeysOwners(admin.Do(ctx, admin.B().Hkeys().Key(key).Build()))
	if err != nil || len(before) != 1 {
		t.Fatalf("HKEYS of the held lock = %q, %v", before, err)
	}
	revoke(cmd)
	err = user.Mutex(lock).Unlock(held)
	checkRefused(t, "Unlock", err, cmd)
	var ae *rlock.AbandonError
	if !errors.As(err, &ae) {
		t.Fatalf("Unlock with %s revoked: %v; want an AbandonError", cmd, err)
	}
	after, err := hkeysOwners(admin.Do(ctx, admin.B().Hkeys().Key(key).Build()))
	if err != nil || len(after) > 0 && !slices.Equal(after, before) {
		t.Errorf("HKEYS of the lock after the refused Unlock = %q, %v; want %q or none: granted to a waiter never told", after, err, before)
	}
	if keys := lockKeysWithoutExpiry(t, ctx, admin, lock); len(keys) > 0 {
		t.Errorf("keys left without an expiry: %q", keys)
	}
	// The hold given up runs out by FreeBy; the waiter re-checks within 4/5
	// of its watchdog timeout after that.
	r := receiveLock(t, waiting, time.Until(ae.FreeBy)+5*time.Second, "the waiter's Lock")
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	if err := other.Mutex(lock).Unlock(r.lc); err != nil {
		t.Fatal(err)
	}
	if keys := lockKeysWithoutExpiry(t, ctx, admin, lock); len(keys) > 0 {
		t.Errorf("keys left without an expiry at the end: %q", keys)
	}
}

// TestACLHandOffNeedsOnlyWhatItRuns: an Unlock that hands the lock to a
// queued waiter is not refused a command that only joining the queue runs
// (ZCARD): the waiter gets the lock at once.
func TestACLHandOffNeedsOnlyWhatItRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, user, other, revoke := refusedClients(t, ctx, rlock.WithWatchdogTimeout(aclLease))
	const lock = "handoff-zcard"
	held, err := user.Mutex(lock).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := lockAsync(ctx, other.Mutex(lock))
	eventually(t, 10*time.Second, "the waiter never queued", func() bool {
		n, err := admin.Do(ctx, admin.B().Zcard().Key("rlock:{"+lock+"}:queue").Build()).AsInt64()
		return err == nil && n > 0
	})
	revoke("ZCARD")
	if err := user.Mutex(lock).Unlock(held); err != nil {
		t.Fatalf("Unlock with ZCARD revoked: %v", err)
	}
	r := receiveLock(t, waiting, 5*time.Second, "the waiter's Lock")
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	if err := other.Mutex(lock).Unlock(r.lc); err != nil {
		t.Fatal(err)
	}
}

// refusedClients returns, on a Redis of its own, a Client of the ACL user of
// the README's rule (user) and one of the default user (other), and a client
// of the default user for looking at the keys (admin). revoke takes a command
// from the ACL user.
func refusedClients(t *testing.T, ctx context.Context, opts ...rlock.Option) (admin rueidis.Client, user, other *rlock.Client, revoke func(cmd string)) {
	t.Helper()
	srv := redistest.Owned(t)
	setACLUser(t, ctx, srv, aclRules)
	admin = redistest.Client(t, srv)
	var err error
	if user, err = rlock.New(redistest.Client(t, srv, userOption), opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = user.Close() })
	if other, err = rlock.New(admin, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return admin, user, other, func(cmd string) {
		t.Helper()
		if _, err := srv.Do(ctx, "ACL", "SETUSER", aclUserName, "-"+strings.ToLower(cmd)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestACLRefusedRWAndSemaphoreLeaveNothing: as TestACLRefusedLockLeavesNothing,
// for the RWMutex and the semaphore.
func TestACLRefusedRWAndSemaphoreLeaveNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cmd string
		take      func(ctx context.Context, c *rlock.Client, name string) (release func() error, err error)
	}{
		{"rlock", "SET", func(ctx context.Context, c *rlock.Client, name string) (func() error, error) {
			lc, err := c.RWMutex(name).RLock(ctx)
			return func() error { return c.RWMutex(name).RUnlock(lc) }, err
		}},
		{"lock", "SET", func(ctx context.Context, c *rlock.Client, name string) (func() error, error) {
			lc, err := c.RWMutex(name).Lock(ctx)
			return func() error { return c.RWMutex(name).Unlock(lc) }, err
		}},
		{"semaphore", "ZADD", func(ctx context.Context, c *rlock.Client, name string) (func() error, error) {
			s := semaphore.New(c, name, semaphore.WithLimit(1))
			pc, err := s.Acquire(ctx, 1)
			return func() error { return s.Release(pc) }, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			admin, user, other, revoke := refusedClients(t, ctx)
			name := "refused-" + tc.name
			revoke(tc.cmd)
			takeCtx, cancelTake := context.WithTimeout(ctx, 5*time.Second)
			_, err := tc.take(takeCtx, user, name)
			cancelTake()
			checkRefused(t, tc.name, err, tc.cmd)
			if keys := lockKeysWithoutExpiry(t, ctx, admin, name); len(keys) > 0 {
				t.Errorf("keys left without an expiry: %q", keys)
			}
			// Taken at once by another Client: a wait would fail the test.
			otherCtx, cancelOther := context.WithTimeout(ctx, time.Second)
			defer cancelOther()
			if release, err := tc.take(otherCtx, other, name); err != nil {
				t.Errorf("taken by another Client after the refused call: %v", err)
			} else if err := release(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestACLRefusedPublishRWAndSemaphore: as TestACLRefusedPublishHandsNothingOff,
// for an RWMutex's write lock and a semaphore's permit.
func TestACLRefusedPublishRWAndSemaphore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, holders string // holders: the key whose fields (or zset members) are the holders
		take          func(ctx context.Context, c *rlock.Client) (release func() error, err error)
	}{
		{"rw", "rlock:{refused-publish-rw}:rw", func(ctx context.Context, c *rlock.Client) (func() error, error) {
			m := c.RWMutex("refused-publish-rw")
			lc, err := m.Lock(ctx)
			return func() error { return m.Unlock(lc) }, err
		}},
		{"semaphore", "rlock:{refused-publish-semaphore}:sem:permits", func(ctx context.Context, c *rlock.Client) (func() error, error) {
			s := semaphore.New(c, "refused-publish-semaphore", semaphore.WithLimit(1))
			pc, err := s.Acquire(ctx, 1)
			return func() error { return s.Release(pc) }, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			admin, user, other, revoke := refusedClients(t, ctx, rlock.WithWatchdogTimeout(aclLease))
			name := "refused-publish-" + tc.name
			release, err := tc.take(ctx, user)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				release func() error
				err     error
			}
			waiting := make(chan result, 1)
			go func() {
				r, err := tc.take(ctx, other)
				waiting <- result{r, err}
			}()
			queue := strings.TrimSuffix(tc.holders, ":permits") + ":queue"
			holders := func() ([]string, error) {
				if strings.HasSuffix(tc.holders, ":permits") {
					return hkeysOwners(admin.Do(ctx, admin.B().Zrange().Key(tc.holders).Min("0").Max("-1").Build()))
				}
				return hkeysOwners(admin.Do(ctx, admin.B().Hkeys().Key(tc.holders).Build()))
			}
			eventually(t, 10*time.Second, "the waiter never queued", func() bool {
				n, err := admin.Do(ctx, admin.B().Zcard().Key(queue).Build()).AsInt64()
				return err == nil && n > 0
			})
			before, err := holders()
			if err != nil || len(before) == 0 {
				t.Fatalf("holders %s while held = %q, %v", tc.holders, before, err)
			}
			revoke("PUBLISH")
			err = release()
			checkRefused(t, "release", err, "PUBLISH")
			var ae *rlock.AbandonError
			if !errors.As(err, &ae) {
				t.Fatalf("release with PUBLISH revoked: %v; want an AbandonError", err)
			}
			after, err := holders()
			if err != nil || len(after) > 0 && !slices.Equal(after, before) {
				t.Errorf("holders %s after the refused release = %q, %v; want %q or none: granted to a waiter never told", tc.holders, after, err, before)
			}
			if keys := lockKeysWithoutExpiry(t, ctx, admin, name); len(keys) > 0 {
				t.Errorf("keys left without an expiry: %q", keys)
			}
			select {
			case r := <-waiting:
				if r.err != nil {
					t.Fatalf("the waiter: %v", r.err)
				}
				if err := r.release(); err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Until(ae.FreeBy) + 5*time.Second):
				t.Fatal("the waiter did not get the lock after the abandoned hold ran out")
			}
		})
	}
}
