package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The spin lock's retry schedule: the first retry after 1ms, doubling up to
// 128ms, starting over with every new Lock call. Common spin locks look like
// this; the cap trades Redis load against how late a waiter notices a free lock.
const (
	spinMinBackoff = time.Millisecond
	spinMaxBackoff = 128 * time.Millisecond
	spinLease      = 30 * time.Second
)

// compareAndDelete releases the spin lock only if it still holds our token,
// so that a holder whose lease ran out cannot delete its successor's lock.
var compareAndDelete = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// spinLock is the classic polling lock: SET key token NX PX, and on failure
// sleep and try again. It is what rlock.Mutex is compared against.
type spinLock struct {
	rc    rueidis.Client
	key   string
	id    string         // distinguishes the tokens of different spinLocks
	seq   *atomic.Uint64 // makes every acquisition's token unique
	lease time.Duration
}

func newSpinLock(rc rueidis.Client, key, id string) *spinLock {
	return &spinLock{rc: rc, key: key, id: id, seq: new(atomic.Uint64), lease: spinLease}
}

// Lock polls until it holds the lock or ctx ends. The returned function
// releases it.
func (s *spinLock) Lock(ctx context.Context) (unlock func() error, err error) {
	token := s.id + ":" + strconv.FormatUint(s.seq.Add(1), 10)
	backoff := spinMinBackoff
	for {
		// Built afresh each time: rueidis recycles a command once it is sent.
		set := s.rc.B().Set().Key(s.key).Value(token).Nx().PxMilliseconds(s.lease.Milliseconds()).Build()
		err := s.rc.Do(ctx, set).Error()
		if err == nil {
			return func() error { return s.unlock(token) }, nil
		}
		if !rueidis.IsRedisNil(err) { // nil reply: NX found the key taken
			return nil, fmt.Errorf("spin lock: %w", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, spinMaxBackoff)
	}
}

// unlock runs compare-and-delete. It does not take the caller's context: a
// release must go through even when the run that took the lock is over.
func (s *spinLock) unlock(token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := compareAndDelete.Exec(ctx, s.rc, []string{s.key}, []string{token}).AsInt64()
	if err != nil {
		return fmt.Errorf("spin unlock: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("spin unlock: lock %q was no longer ours", s.key)
	}
	return nil
}

// Close does nothing: a spinLock keeps no state outside Redis.
func (s *spinLock) Close() error { return nil }
