package rlock_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// keysWithoutExpiry lists the keys of the lock name that have no expiry, but
// those in planted (keys the test wrote itself, standing for someone else's).
func keysWithoutExpiry(t *testing.T, e *ftEnv, name string, planted ...string) []string {
	t.Helper()
	var forever []string
	var cursor uint64
	for {
		se, err := e.raw.Do(e.ctx, e.raw.B().Scan().Cursor(cursor).Match(e.lockKey(name)+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range se.Elements {
			ms, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if ms == -1 && !slices.Contains(planted, k) {
				forever = append(forever, k)
			}
		}
		if cursor = se.Cursor; cursor == 0 {
			return forever
		}
	}
}

// plant writes a string where a key of the lock is expected (someone else's
// key, or one written in its place).
func plant(t *testing.T, e *ftEnv, key string) string {
	t.Helper()
	if _, err := e.srv.Do(e.ctx, "SET", key, "not-a-lock-key"); err != nil {
		t.Fatal(err)
	}
	return key
}

// A call that fails on a key of the wrong type leaves no key of its own
// without an expiry: the arrival counter written before the queue's ZADD
// failed, a reader or permit added before its counts hash refused it.
func TestWrongTypedKeyLeavesNoKeyWithoutExpiry(t *testing.T) {
	e := ftNewEnv(t)
	holder, waiter := e.client(), e.client()
	wait := func(lock func(context.Context) (context.Context, error)) error {
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		defer cancel()
		_, err := lock(ctx)
		return err
	}

	t.Run("mutex queue", func(t *testing.T) {
		const name = "wrong-queue"
		held := ftLock(t, e.ctx, holder.Mutex(name))
		queue := plant(t, e, e.lockKey(name)+":queue")
		defer func() {
			_, _ = e.srv.Do(e.ctx, "DEL", queue)
			mustUnlockFT(t, holder.Mutex(name), held)
		}()
		if err := wait(func(ctx context.Context) (context.Context, error) { return waiter.Mutex(name).Lock(ctx) }); err == nil {
			t.Fatal("Lock succeeded against a queue of the wrong type")
		}
		if forever := keysWithoutExpiry(t, e, name, queue); len(forever) > 0 {
			t.Fatalf("keys left without an expiry: %q", forever)
		}
	})

	t.Run("rwmutex waiters", func(t *testing.T) {
		const name = "wrong-waiters"
		rw := holder.RWMutex(name)
		held := rwLock(t, e.ctx, rw, true)
		waiters := plant(t, e, e.lockKey(name)+":rw:waiters")
		defer func() {
			_, _ = e.srv.Do(e.ctx, "DEL", waiters)
			rwUnlock(t, rw, held, true)
		}()
		if err := wait(func(ctx context.Context) (context.Context, error) { return waiter.RWMutex(name).Lock(ctx) }); err == nil {
			t.Fatal("Lock succeeded against a waiters zset of the wrong type")
		}
		if forever := keysWithoutExpiry(t, e, name, waiters); len(forever) > 0 {
			t.Fatalf("keys left without an expiry: %q", forever)
		}
	})

	t.Run("rwmutex reader counts", func(t *testing.T) {
		const name = "wrong-counts"
		counts := plant(t, e, e.lockKey(name)+":rw:r:n")
		if _, err := waiter.RWMutex(name).TryRLock(e.ctx); err == nil {
			t.Fatal("RLock succeeded against a counts hash of the wrong type")
		}
		if forever := keysWithoutExpiry(t, e, name, counts); len(forever) > 0 {
			t.Fatalf("keys left without an expiry: %q", forever)
		}
		if _, err := e.srv.Do(e.ctx, "DEL", counts); err != nil {
			t.Fatal(err)
		}
		w, err := holder.RWMutex(name).TryLock(e.ctx)
		if err != nil {
			t.Fatalf("a writer after the failed RLock (counts repaired): %v; the failed RLock left a reader", err)
		}
		rwUnlock(t, holder.RWMutex(name), w, true)
	})
}
