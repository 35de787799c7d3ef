package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

func ExampleRWMutex() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example-rw"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	rw := c.RWMutex("catalog")

	// Readers share the lock.
	r1, err := rw.RLock(ctx)
	if err != nil {
		panic(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = rw.TryLock(ctx)
	fmt.Println("writer locked out by readers:", errors.Is(err, rlock.ErrLocked))
	// A reader may not upgrade: two upgraders would wait for each other.
	_, err = rw.Lock(r1)
	fmt.Println("upgrade refused:", errors.Is(err, rlock.ErrUpgrade))
	_ = rw.RUnlock(r1)
	_ = rw.RUnlock(r2)

	// A writer excludes everyone, and may downgrade: take the read lock under
	// the write lock, and keep it after Unlock.
	w, err := rw.Lock(ctx)
	if err != nil {
		panic(err)
	}
	r, err := rw.RLock(w)
	if err != nil {
		panic(err)
	}
	_ = rw.Unlock(w)
	fmt.Println("write lock context ended by:", context.Cause(w))
	fmt.Println("read lock context still live:", r.Err() == nil)
	other, err := rw.TryRLock(ctx)
	fmt.Println("other readers welcome again:", err == nil)
	_ = rw.RUnlock(other)
	_ = rw.RUnlock(r)
	// Output:
	// writer locked out by readers: true
	// upgrade refused: true
	// write lock context ended by: rlock: unlocked
	// read lock context still live: true
	// other readers welcome again: true
}
