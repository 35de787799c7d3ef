package measure

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
)

// The spin lock's retry schedule: the first retry after 1ms, doubling up to
// 128ms, starting over with every Lock call. Hand-rolled locks commonly look
// like this; the cap trades Redis load against how late a waiter notices that
// the lock is free.
const (
	SpinMinBackoff = time.Millisecond
	SpinMaxBackoff = 128 * time.Millisecond
)

// SpinLocker is the classic polling lock that rlock replaces: SET key token
// NX PX, and on failure sleep and try again. One SpinLocker serves every lock
// of one client.
type SpinLocker struct {
	rc    rueidis.Client
	id    string        // distinguishes the tokens of different lockers
	seq   atomic.Uint64 // makes every acquisition's token unique
	lease time.Duration
}

// NewSpinLocker returns a spin locker on rc whose tokens start with id and
// whose locks expire after lease.
func NewSpinLocker(rc rueidis.Client, id string, lease time.Duration) *SpinLocker {
	return &SpinLocker{rc: rc, id: id, lease: lease}
}

// Lock polls key until it holds it or ctx ends. The returned function
// releases the lock with a compare-and-delete.
func (s *SpinLocker) Lock(ctx context.Context, key string) (unlock func(context.Context) error, err error) {
	token := s.id + ":" + strconv.FormatUint(s.seq.Add(1), 10)
	backoff := SpinMinBackoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Built afresh each time: rueidis recycles a command once it is sent.
		set := s.rc.B().Set().Key(key).Value(token).Nx().PxMilliseconds(s.lease.Milliseconds()).Build()
		err := s.rc.Do(ctx, set).Error()
		if err == nil {
			return func(ctx context.Context) error { return s.unlock(ctx, key, token) }, nil
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
		backoff = min(2*backoff, SpinMaxBackoff)
	}
}

func (s *SpinLocker) unlock(ctx context.Context, key, token string) error {
	n, err := lua.SpinRelease.Exec(ctx, s.rc, []string{key}, []string{token}).AsInt64()
	if err != nil {
		return fmt.Errorf("spin unlock: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("spin unlock: lock %q was no longer ours", key)
	}
	return nil
}
