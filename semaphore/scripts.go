package semaphore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

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
		[]string{mode, strconv.FormatInt(limit, 10), publishCommand, s.keys.channel, s.limit}).AsIntSlice()
	s.c.NoteError(err)
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
	status int64 // 1 acquired, 0 not now, -2 abandoned id, -3 exceeds limit, -4 no limit, -5 not a lock's limit
	value  int64 // permits acquired, ms to the earliest expiry, or the limit
	before bool  // acquired by an earlier request of the same id
}

func (s *Semaphore) acquireScript(ctx context.Context, id, want string, lease time.Duration, enqueue bool) (acquireReply, error) {
	queue, exact := "0", "0"
	if enqueue {
		queue = "1"
	}
	if s.exact {
		exact = "1"
	}
	vals, err := lua.SemAcquire.Exec(ctx, s.c.RC, s.keys.with(s.keys.tombstone(id)),
		[]string{id, want, ms(lease), ms(s.c.Cfg.WatchdogTimeout), publishCommand, s.keys.channel, queue, s.limit, exact}).AsIntSlice()
	s.c.NoteError(err)
	if err != nil {
		return acquireReply{}, err
	}
	if len(vals) == 0 {
		return acquireReply{}, fmt.Errorf("unexpected acquire reply %v", vals)
	}
	r := acquireReply{status: vals[0]}
	if len(vals) > 1 {
		r.value = vals[1]
	}
	r.before = len(vals) > 2 && vals[2] == 1
	return r, nil
}

func (s *Semaphore) releaseScript(ctx context.Context, id, requestID string) (int64, error) {
	n, err := lua.SemRelease.Exec(ctx, s.c.RC, s.keys.with(s.keys.latch(requestID)),
		[]string{id, publishCommand, s.keys.channel, ms(s.c.Cfg.UnlockTimeout + time.Second)}).AsInt64()
	s.c.NoteError(err)
	return n, err
}

// abandonScript takes id out of the queue and gives back whatever it holds;
// it is idempotent.
func (s *Semaphore) abandonScript(ctx context.Context, id string) error {
	err := lua.SemAbandon.Exec(ctx, s.c.RC, s.keys.with(s.keys.tombstone(id)),
		[]string{id, ms(s.c.Cfg.WatchdogTimeout), publishCommand, s.keys.channel}).Error()
	s.c.NoteError(err)
	return err
}

// abandon gives up id, for a waiter that gives up or an acquisition whose
// outcome is unknown, before returning: once the call that used id returns,
// id is no longer queued and holds nothing, so that nobody finds its entry in
// the way. ctx is the caller's, whose cancellation it ignores: the attempt is
// bounded by the unlock timeout instead. Only when Redis cannot be reached is
// the clean-up left to the background, retried until id's entries would have
// expired anyway (lease is the lease its acquisition asked for).
func (s *Semaphore) abandon(ctx context.Context, id string, lease time.Duration) {
	freeBy := time.Now().Add(max(lease, s.c.Cfg.WatchdogTimeout))
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.Cfg.UnlockTimeout)
	err := s.abandonScript(actx, id)
	cancel()
	if err == nil || !unreachable(err) {
		return
	}
	s.c.GoUntil(freeBy, func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error { return s.abandonScript(ctx, id) })
	})
}

// unreachable tells errors that say nothing of whether Redis ran the command
// (a connection failure or timeout), or that mean "not now".
func unreachable(err error) bool {
	if _, isRedis := rueidis.IsRedisErr(err); !isRedis {
		return true
	}
	return core.Transient(err)
}

// permitKind renews permit leases for the watchdog.
var permitKind = &core.Kind{Name: "semaphore", Renew: renewPermits}

// renewPermits extends a batch of leases; with each permits zset go the
// counts and state keys of its semaphore, whose expiries follow the lease.
func renewPermits(ctx context.Context, c *core.Client, group []*core.Hold, lease time.Duration) ([]int64, error) {
	keys := make([]string, 0, 3*len(group))
	args := make([]string, 1, len(group)+1)
	args[0] = ms(lease)
	for _, h := range group {
		base := strings.TrimSuffix(h.Key, permitsSuffix)
		keys = append(keys, h.Key, base+countsSuffix, base)
		args = append(args, h.Owner)
	}
	return lua.SemRenew.Exec(ctx, c.RC, keys, args).AsIntSlice()
}
