package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The spin lock's retry schedule: the first retry after 1ms, doubling up to
// 128ms, starting over with every Lock call. Common hand-rolled locks look
// like this; the cap trades Redis load against how late a waiter notices that
// the lock is free.
const (
	spinMinBackoff = time.Millisecond
	spinMaxBackoff = 128 * time.Millisecond
)

// compareAndDelete releases the spin lock only if it still holds our token,
// so that a holder whose lease ran out cannot delete its successor's lock.
var compareAndDelete = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// spinClient is the classic polling lock: SET key token NX PX, and on failure
// sleep and try again.
type spinClient struct {
	rc     rueidis.Client
	prefix string
	id     string        // distinguishes the tokens of different clients
	seq    atomic.Uint64 // makes every acquisition's token unique
}

func openSpin(_ context.Context, env OpenEnv) (LockClient, error) {
	rc, err := newRueidis(env)
	if err != nil {
		return nil, err
	}
	return &spinClient{rc: rc, prefix: env.Prefix, id: rand.Text()[:12]}, nil
}

func (s *spinClient) Lock(ctx context.Context, name string) (Held, error) {
	key := s.prefix + ":" + name
	token := s.id + ":" + strconv.FormatUint(s.seq.Add(1), 10)
	backoff := spinMinBackoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Built afresh each time: rueidis recycles a command once it is sent.
		set := s.rc.B().Set().Key(key).Value(token).Nx().PxMilliseconds(leaseTTL.Milliseconds()).Build()
		err := s.rc.Do(ctx, set).Error()
		if err == nil {
			return heldFunc(func(ctx context.Context) error { return s.unlock(ctx, key, token) }), nil
		}
		if !rueidis.IsRedisNil(err) { // a nil reply: NX found the key taken
			return nil, fmt.Errorf("spin lock: %w", err)
		}
		timer.Reset(backoff) // the spin lock's own backoff: this is the workload
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, spinMaxBackoff)
	}
}

func (s *spinClient) unlock(ctx context.Context, key, token string) error {
	n, err := compareAndDelete.Exec(ctx, s.rc, []string{key}, []string{token}).AsInt64()
	if err != nil {
		return fmt.Errorf("spin unlock: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("spin unlock: lock %q was no longer ours", key)
	}
	return nil
}

func (s *spinClient) Close() error { s.rc.Close(); return nil }
