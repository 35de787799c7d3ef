package semaphore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/rlock"
)

// publishCommand is what scripts publish with: SPUBLISH when the Client's
// multiplexer subscribes with sharded pub/sub (a Redis 7 cluster), else
// PUBLISH, marked as counting no receivers in a cluster (see
// core.Client.PublishArg and pubsub.WithSharding).
func publishCommand(ctx context.Context, c *core.Client) string { return c.PublishArg(ctx) }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

type limitReply struct {
	State
	changed bool
}

func (s *Semaphore) limitScript(ctx context.Context, mode string, limit int64) (limitReply, error) {
	vals, err := lua.Ints(lua.SemLimit.Exec(ctx, s.c.Scripts, s.keys.common(),
		[]string{mode, strconv.FormatInt(limit, 10), publishCommand(ctx, s.c), s.keys.grantPrefix, s.limit}))
	s.c.NoteError(err)
	if err != nil {
		return limitReply{}, err
	}
	if len(vals) != 4 {
		return limitReply{}, fmt.Errorf("unexpected limit reply %v", vals)
	}
	return limitReply{changed: vals[0] == 1, State: State{Limit: vals[1], Held: vals[2], Queued: vals[3]}}, nil
}

// recheckCap is the longest a queued waiter waits before re-checking (sooner
// when the earliest held permit expires sooner). Redis keeps its place for a
// grace period past the re-check it planned (queue_grace, set in sem_lib.lua), and a grant
// that permits ahead are held for a claim window only comes with a notice
// when the head planned to re-check later.
func recheckCap(c *core.Client) time.Duration { return c.Cfg.WatchdogTimeout / 3 }

// acquireReply is sem_acquire.lua's answer.
type acquireReply struct {
	status int64 // 1 acquired, 0 not now, -2 abandoned id, -3 exceeds limit, -4 no limit, -5 not a lock's limit
	value  int64 // permits acquired, ms to the earliest expiry, or the limit
	before bool  // the id held the permits already (taken by an earlier request, or handed to it)
	// arrival is the number of the place an attempt queued at (0 when it
	// did not queue): a grant to that place names it (see parseGrant).
	arrival uint64
	// acked is how many replicas acknowledged an acquisition (WAIT, with
	// rlock.WithReplicaAck; -1 when none was asked).
	acked int64
}

// acquireArgs is one call of sem_acquire.lua.
type acquireArgs struct {
	id, want, secret string
	lease            time.Duration
	enqueue          bool // join (or stay in) the queue when the permits are not free
	fresh            bool // the first request sent for id
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (s *Semaphore) acquireScript(ctx context.Context, a acquireArgs) (acquireReply, error) {
	keys := s.keys.with(s.keys.tombstone(a.id))
	args := []string{a.id, a.want, ms(a.lease), ms(recheckCap(s.c)), publishCommand(ctx, s.c), s.keys.grantPrefix,
		flag(a.enqueue), s.limit, flag(s.exact), a.secret, flag(a.fresh), ms(s.c.Cfg.ClaimWindow)}
	if s.c.Acking() {
		// rlock.WithReplicaAck: WAIT after an acquisition, on its
		// connection. Permits handed over by a release are covered too:
		// sem_acquire.lua, which finds them, sets their lease afresh (a
		// write of this connection).
		var r acquireReply
		acked, err := s.c.RunAcked(ctx, lua.SemAcquireOn, keys, args, false, func(res rueidis.RedisResult) (bool, error) {
			vals, err := lua.Ints(res)
			if err != nil {
				return false, err
			}
			r, err = parseAcquireReply(vals)
			return err == nil && r.status == 1, err
		})
		s.c.NoteError(err)
		r.acked = acked
		return r, err
	}
	vals, err := lua.Ints(lua.SemAcquire.Exec(ctx, s.c.Scripts, keys, args))
	s.c.NoteError(err)
	if err != nil {
		return acquireReply{}, err
	}
	r, err := parseAcquireReply(vals)
	r.acked = -1
	return r, err
}

// parseAcquireReply checks and decodes sem_acquire.lua's reply; anything but
// one of the shapes the script returns is an error.
func parseAcquireReply(vals []int64) (acquireReply, error) {
	if len(vals) == 0 {
		return acquireReply{}, errors.New("semaphore: empty acquire reply")
	}
	r := acquireReply{status: vals[0]}
	switch {
	case r.status == 1 && len(vals) == 2 && vals[1] > 0:
		r.value = vals[1]
	case r.status == 1 && len(vals) == 3 && vals[1] > 0 && vals[2] == 1:
		r.value, r.before = vals[1], true
	case r.status == 0 && len(vals) == 3 && vals[1] >= -1 && vals[2] >= 0:
		r.value, r.arrival = vals[1], uint64(vals[2])
	case (r.status == -3 || r.status == -5) && len(vals) == 2:
		r.value = vals[1]
	case (r.status == -2 || r.status == -4) && len(vals) == 1:
	default:
		return acquireReply{}, fmt.Errorf("semaphore: unexpected acquire reply %v", vals)
	}
	return r, nil
}

// entry is a waiter's queue entry, as sem_acquire.lua builds it from its
// arguments (see sem_lib.lua).
func (s *Semaphore) entry(id, want string, lease time.Duration, secret string) string {
	if s.exact {
		want += "=" + s.limit
	}
	return core.QueueEntry(id, lease, s.c.Cfg.ClaimWindow, secret, want)
}

// releaseReply is sem_release.lua's answer.
type releaseReply struct {
	released int64 // permits released; -1 the id held none, -2 its lease had expired
	kept     bool  // kept for the successor: no one else waited
	unqueued bool  // released; the reserved successor was not queued
	queued   bool  // released; the successor was queued at arrival
	arrival  uint64
	granted  int64 // ms the first permit handed on runs for; 0: none was
}

// releaseScript runs sem_release.lua; retry tells that an earlier attempt of
// the request may have run, so that its latch is looked up. next, when
// named, is queued behind the release (or the permit is kept for it, its
// lease re-set to lease; see sem_release.lua).
func (s *Semaphore) releaseScript(ctx context.Context, id, requestID string, retry bool, next *core.Succession, lease time.Duration) (releaseReply, error) {
	entry, reserved := "", false
	if next != nil {
		entry, reserved = s.entry(next.Owner, "1", s.c.Cfg.WatchdogTimeout, next.Secret), next.Reserved
	}
	vals, err := lua.Ints(lua.SemRelease.Exec(ctx, s.c.Scripts, s.keys.with(s.keys.latch(requestID)),
		[]string{id, publishCommand(ctx, s.c), s.keys.grantPrefix, ms(s.c.Cfg.UnlockTimeout + time.Second), flag(retry),
			entry, ms(recheckCap(s.c)), flag(reserved), ms(lease)}))
	s.c.NoteError(err)
	if err != nil {
		return releaseReply{}, err
	}
	return parseReleaseReply(vals)
}

// parseReleaseReply checks and decodes sem_release.lua's reply.
func parseReleaseReply(vals []int64) (releaseReply, error) {
	switch {
	case len(vals) == 1 && vals[0] >= -2:
		return releaseReply{released: vals[0]}, nil
	case len(vals) == 1 && vals[0] == -3:
		return releaseReply{kept: true}, nil
	case len(vals) == 1 && vals[0] == -4:
		return releaseReply{released: 1, unqueued: true}, nil
	case len(vals) == 3 && vals[0] >= 0 && vals[1] > 0 && vals[2] >= 0:
		return releaseReply{released: vals[0], queued: true, arrival: uint64(vals[1]), granted: vals[2]}, nil
	}
	return releaseReply{}, fmt.Errorf("semaphore: unexpected release reply %v", vals)
}

// abandonScript takes id out of the queue (entry: its queue entry, or "" when
// it cannot be queued) and gives back whatever it holds; it is idempotent.
func (s *Semaphore) abandonScript(ctx context.Context, id, entry string) error {
	err := lua.SemAbandon.Exec(ctx, s.c.Scripts, s.keys.with(s.keys.tombstone(id)),
		[]string{id, entry, ms(s.c.Cfg.WatchdogTimeout), publishCommand(ctx, s.c), s.keys.grantPrefix}).Error()
	s.c.NoteError(err)
	return err
}

// holdSpec is the spec of a hold of permits under id (see core.HoldSpec).
// Its GiveBack frees them in Redis when the hold lapses while a renewal or
// claim extension may have run, or when Close ends it.
func (s *Semaphore) holdSpec(id string, lease time.Duration, renew bool, ctx context.Context, cancel context.CancelCauseFunc) core.HoldSpec {
	return core.HoldSpec{Kind: permitKind, Name: s.name, Key: s.keys.permits, Owner: id, Lease: lease, Renew: renew,
		Ctx: ctx, Cancel: cancel, GiveBack: s.giveBack}
}

func (s *Semaphore) giveBack(ctx context.Context, h *core.Hold) error {
	return s.abandonScript(ctx, h.Owner(), "")
}

func newSecret() string { return core.NewSecret() }

// keepGrant is the rule by which the Waiter of a place a release queued for
// its Client's next Acquire (see core.Turns.Succeed) keeps a message to its
// permit id until the attempt takes it (see core.KeepData): a later message,
// which anyone may publish, never displaces a grant proven with secret.
func keepGrant(secret string) func(held, next string) bool {
	return core.KeepData(func(data string) (uint64, bool) {
		g, ok := parseGrant(data, secret)
		return g.arrival, ok
	}, rlock.MaxClaimWindow)
}

// grant is a hand-off of permits to a queued waiter, as its message tells it.
type grant struct {
	n       int64  // permits granted
	arrival uint64 // the arrival number of the place granted
}

// parseGrant decodes the data of a message handing permits to a queued waiter
// (see sem_lib.lua): a proof (see core.ParseGrant) of the permits granted
// (positive) to the place arrival. A recorded grant published again proves
// itself still: the waiter takes only one to the place its last attempt
// reported (see acquisition.handedOff), and no place is given the number of
// another.
func parseGrant(data, secret string) (g grant, ok bool) {
	p, ok := core.ParseGrant(data, secret, 1)
	if !ok || p.Fields[0] == 0 || p.Fields[0] > math.MaxInt64 {
		return grant{}, false
	}
	return grant{n: int64(p.Fields[0]), arrival: p.Arrival}, true
}

// abandon gives up id (queued under entry, if at all), for a waiter that
// gives up or an acquisition whose outcome is unknown, before returning: once
// the call that used id returns, id is no longer queued and holds nothing, so
// that nobody finds its entry in the way. ctx is the caller's, whose cancellation it ignores: the attempt is
// bounded by the unlock timeout instead. Only when Redis cannot be reached is
// the clean-up left to the background, retried until id's entries would have
// expired anyway (lease is the lease its acquisition asked for).
func (s *Semaphore) abandon(ctx context.Context, id, entry string, lease time.Duration) {
	freeBy := time.Now().Add(max(lease, s.c.Cfg.WatchdogTimeout))
	actx, cancel := s.c.UnlockContext(ctx)
	err := s.abandonScript(actx, id, entry)
	cancel()
	if err == nil || !unreachable(err) {
		return
	}
	s.c.GoUntil(freeBy, func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error { return s.abandonScript(ctx, id, entry) })
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
var permitKind = &core.Kind{Name: "semaphore", Script: lua.SemRenew, Args: renewPermitsArgs, LeaseLost: ErrLeaseLost}

// renewPermitsArgs are sem_renew.lua's keys and args for a batch of leases;
// with each permits zset go the counts and state keys of its semaphore, whose
// expiries follow the lease.
func renewPermitsArgs(group []*core.Hold, lease time.Duration) (keys, args []string) {
	keys = make([]string, 0, 3*len(group))
	args = make([]string, 1, len(group)+1)
	args[0] = ms(lease)
	for _, h := range group {
		base := strings.TrimSuffix(h.Key(), permitsSuffix)
		keys = append(keys, h.Key(), base+countsSuffix, base)
		args = append(args, h.Owner())
	}
	return keys, args
}
