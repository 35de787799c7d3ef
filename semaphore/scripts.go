package semaphore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

const publishCommand = "PUBLISH"

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

type limitReply struct {
	State
	changed bool
}

func (s *Semaphore) limitScript(ctx context.Context, mode string, limit int64) (limitReply, error) {
	vals, err := lua.SemLimit.Exec(ctx, s.c.RC, s.keys.common(),
		[]string{mode, strconv.FormatInt(limit, 10), publishCommand, s.keys.channel}).AsIntSlice()
	if err != nil {
		return limitReply{}, err
	}
	if len(vals) != 4 {
		return limitReply{}, fmt.Errorf("unexpected limit reply %v", vals)
	}
	return limitReply{changed: vals[0] == 1, State: State{Limit: vals[1], Held: vals[2], Queued: vals[3]}}, nil
}

// acquireReply is sem_acquire.lua's answer.
type acquireReply struct {
	status int64 // 1 acquired, 0 not now, -2 abandoned id, -3 exceeds limit, -4 no limit
	value  int64 // permits acquired, ms to the earliest expiry, or the limit
}

func (s *Semaphore) acquireScript(ctx context.Context, id, want string, lease time.Duration, enqueue bool) (acquireReply, error) {
	queue := "0"
	if enqueue {
		queue = "1"
	}
	vals, err := lua.SemAcquire.Exec(ctx, s.c.RC, s.keys.with(s.keys.tombstone(id)),
		[]string{id, want, ms(lease), ms(s.c.Cfg.WatchdogTimeout), publishCommand, s.keys.channel, queue}).AsIntSlice()
	if err != nil {
		return acquireReply{}, err
	}
	r := acquireReply{status: vals[0]}
	if len(vals) > 1 {
		r.value = vals[1]
	}
	return r, nil
}

func (s *Semaphore) releaseScript(ctx context.Context, id, requestID string) (int64, error) {
	return lua.SemRelease.Exec(ctx, s.c.RC, s.keys.with(s.keys.latch(requestID)),
		[]string{id, publishCommand, s.keys.channel, ms(s.c.Cfg.UnlockTimeout + time.Second)}).AsInt64()
}

// abandon takes id out of the queue and gives back whatever it holds, in the
// background: for waiters that give up, and acquisitions with unknown outcome.
func (s *Semaphore) abandon(id string) {
	s.c.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.c.Cfg.UnlockTimeout)
		defer cancel()
		_ = core.RetryTransient(ctx, func() error {
			return lua.SemAbandon.Exec(ctx, s.c.RC, s.keys.with(s.keys.tombstone(id)),
				[]string{id, ms(s.c.Cfg.WatchdogTimeout), publishCommand, s.keys.channel}).Error()
		})
	})
}

// permitKind renews permit leases for the watchdog.
var permitKind = &core.Kind{Name: "semaphore", Renew: renewPermits}

func renewPermits(ctx context.Context, c *core.Client, group []*core.Hold, lease time.Duration) ([]int64, error) {
	keys := make([]string, len(group))
	args := make([]string, 1, len(group)+1)
	args[0] = ms(lease)
	for i, h := range group {
		keys[i] = h.Key
		args = append(args, h.Owner)
	}
	return lua.SemRenew.Exec(ctx, c.RC, keys, args).AsIntSlice()
}
