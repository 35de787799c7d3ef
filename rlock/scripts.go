package rlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

// unlockMessage is published when a QuorumMutex's lock becomes free and no
// one is queued in Redis, for its waiters, which listen on every master's
// unlock channel; the multiplexer reads it as a budget of one local waiter to
// wake. A Mutex's waiters queue in Redis (a Lock that found the lock taken
// tries again, queued, once it listens), so its Unlock announces nothing
// when no one is queued: one PUBLISH fewer on the uncontended path. With
// a queue, the lock is handed to the head waiter, which is told by name:
// "@" + owner + " " + grant (see parseGrant), and the waiter queued next is
// told when that grant's claim window lapses: "@" + owner + " ~" + ms (see
// core.ParseNotice).
const unlockMessage = "1"

// publishCommand is what scripts publish with: SPUBLISH when the Client's
// multiplexer subscribes with sharded pub/sub (a Redis 7 cluster), else
// PUBLISH, marked as counting no receivers in a cluster (see
// core.Client.PublishArg and pubsub.WithSharding).
func publishCommand(ctx context.Context, c *core.Client) string { return c.PublishArg(ctx) }

func ms(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// acquireReply is acquire.lua's answer.
type acquireReply struct {
	status int64 // 1 acquired, 0 held by another, -1 re-entry of a lost hold, -2 abandoned owner
	token  uint64
	last   uint64 // token..last: the fencing tokens reserved for this holder
	count  int64
	left   int64 // waiters queued in Redis when acquired
	wait   int64 // ms worth waiting before re-checking, -1: no expiry
	// fence is the fencing counter when a queued attempt failed: a hand-off
	// with tokens not above it predates the attempt.
	fence uint64
	// acked is how many replicas acknowledged an acquisition (WAIT, with
	// WithReplicaAck; -1 when none was asked).
	acked int64
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// parseAcquireReply checks and decodes acquire.lua's reply; anything but one
// of the shapes the script returns is an error.
func parseAcquireReply(vals []int64) (acquireReply, error) {
	if len(vals) == 0 {
		return acquireReply{}, errors.New("rlock: empty acquire reply")
	}
	r := acquireReply{status: vals[0]}
	switch {
	case len(vals) == 1 && vals[0] > 0:
		// The first hold with a single token, as one number (the
		// uncontended Lock's reply, see acquire.lua).
		r = acquireReply{status: 1, token: uint64(vals[0]), count: 1, last: uint64(vals[0])}
	case r.status == 1 && len(vals) == 5 && vals[1] >= 0 && vals[2] >= 1 && vals[3] >= vals[1] && vals[4] >= 0:
		r.token, r.count, r.last, r.left = uint64(vals[1]), vals[2], uint64(vals[3]), vals[4]
	case r.status == 0 && len(vals) == 3 && vals[1] >= -1 && vals[2] >= 0:
		r.wait, r.fence = vals[1], uint64(vals[2])
	case (r.status == -1 || r.status == -2) && len(vals) == 1:
	default:
		return acquireReply{}, fmt.Errorf("rlock: unexpected acquire reply %v", vals)
	}
	return r, nil
}

// grant is a hand-off to a queued waiter, as its message tells it.
type grant struct {
	first, last uint64 // the fencing tokens reserved for the new holder
	left        int64  // waiters still queued behind it
}

// parseGrant decodes the data of a message handing the lock to a queued
// waiter (see mutex_lib.lua): a proof (see core.ParseGrant) of the fencing
// tokens first..last reserved for it (first positive, first <= last) and the
// waiters queued behind it. The waiter takes only tokens above the fencing
// counter its last attempt saw, which a grant it let lapse never has.
func parseGrant(data, secret string) (g grant, ok bool) {
	p, ok := core.ParseGrant(data, secret, 3)
	first, last, left := p.Fields[0], p.Fields[1], p.Fields[2]
	if !ok || first == 0 || last < first || left > math.MaxInt64 {
		return grant{}, false
	}
	return grant{first: first, last: last, left: int64(left)}, true
}

// recheckCap is the longest a queued waiter waits before re-checking: sooner
// than the holder's lease end only behind a lock with no expiry or a long one.
// Redis keeps its place for a grace period past the re-check it planned (see
// queue_grace).
func recheckCap(c *core.Client) time.Duration { return c.Cfg.WatchdogTimeout * 4 / 5 }

// acquireArgs is one call of acquire.lua.
type acquireArgs struct {
	owner   string
	secret  string // the waiter's secret, part of its queue entry
	lease   time.Duration
	enqueue bool   // join (or stay in) the queue when the lock is taken
	reentry string // request id of a re-entry; "" for a first acquisition
}

// acquireScript runs acquire.lua. A contended acquisition (enqueue) reserves a
// block of fencing tokens, which the holder may pass on to goroutines of its
// Client (see turns.go); an uncontended one takes a single token.
func acquireScript(ctx context.Context, c *core.Client, k keys, a acquireArgs) (acquireReply, error) {
	block := "1"
	if a.enqueue {
		block = tokenBlockArg
	}
	latch := k.lock // unused unless re-entering
	if a.reentry != "" {
		latch = k.latch(a.reentry)
	}
	keys := []string{k.lock, k.fence, k.tombstone(a.owner), k.queue, k.waiters, k.seq, latch}
	args := []string{a.owner, ms(a.lease), flag(a.reentry != ""), flag(a.enqueue), ms(recheckCap(c)), publishCommand(ctx, c), k.channel,
		block, tokenBlockArg, a.secret, latchLifetime(c), k.grantPrefix, ms(c.Cfg.ClaimWindow)}
	if c.Cfg.ReplicaAck > 0 {
		// WithReplicaAck: a re-entry (whose hold the watchdog keeps) may
		// wait for the replicas as long as the caller does; a first
		// acquisition is given back instead (see acquisition.unacked).
		r, acked, err := acquireAcked(ctx, c, keys, args, a.reentry != "" && c.Cfg.ReplicaAckRetry)
		r.acked = acked
		return r, err
	}
	vals, err := lua.Ints(lua.Acquire.Exec(ctx, c.Scripts, keys, args))
	if err != nil {
		return acquireReply{}, err
	}
	return parseAcquireReply(vals)
}

// latchLifetime is how long a request's result is kept for its retries: they
// stop after the unlock timeout.
func latchLifetime(c *core.Client) string { return ms(c.Cfg.UnlockTimeout + time.Second) }

// releaseReply is release.lua's answer.
type releaseReply struct {
	left int64 // holds left; 0: freed (or kept, see kept); -1: not held
	// With a successor named: kept reports that the lock stayed with the
	// owner field, with tokens first..last; otherwise, when freed, the
	// successor is queued, fence is the fencing counter after the hand-off
	// and granted the lease (ms) handed to the head waiter (0: none was).
	// unqueued: a reserved successor was not queued (no one else was).
	kept        bool
	unqueued    bool
	first, last uint64
	fence       uint64
	granted     int64
}

func parseReleaseReply(vals []int64) (releaseReply, error) {
	switch {
	case len(vals) == 1 && vals[0] >= -1:
		return releaseReply{left: vals[0]}, nil
	case len(vals) == 1 && vals[0] == -4:
		return releaseReply{unqueued: true}, nil
	case len(vals) == 3 && vals[0] == 0 && vals[1] >= 0 && vals[2] >= 0:
		return releaseReply{fence: uint64(vals[1]), granted: vals[2]}, nil
	case len(vals) == 3 && vals[0] == -3 && vals[1] > 0 && vals[2] >= vals[1]:
		return releaseReply{kept: true, first: uint64(vals[1]), last: uint64(vals[2])}, nil
	}
	return releaseReply{}, fmt.Errorf("rlock: unexpected release reply %v", vals)
}

// releaseScript runs release.lua. next, when named, is queued behind the
// release (or the lock is kept for it; see release.lua). bury leaves a
// tombstone of owner when the release frees it: an acquisition attempt of it
// may still run late.
func releaseScript(ctx context.Context, c *core.Client, k keys, owner string, req *request, lease time.Duration, next *core.Succession, bury bool) (releaseReply, error) {
	return releaseScriptAnnouncing(ctx, c, k, owner, req, lease, next, bury, "")
}

// releaseScriptAnnouncing is releaseScript publishing message on the unlock
// channel when the lock is freed with no one queued ("" for nothing).
func releaseScriptAnnouncing(ctx context.Context, c *core.Client, k keys, owner string, req *request, lease time.Duration, next *core.Succession, bury bool, message string) (releaseReply, error) {
	entry, reserved := "", false
	if next != nil {
		entry = core.QueueEntry(next.Owner, c.Cfg.WatchdogTimeout, c.Cfg.ClaimWindow, next.Secret, "")
		reserved = next.Reserved
	}
	tombstone := "0"
	if bury {
		tombstone = ms(c.Cfg.WatchdogTimeout)
	}
	resent := flag(req.sent)
	req.sent = true
	vals, err := lua.Ints(lua.Release.Exec(ctx, c.Scripts, []string{k.lock, k.latch(req.id), k.queue, k.waiters, k.fence, k.seq, k.tombstone(owner)},
		[]string{owner, ms(lease), publishCommand(ctx, c), k.channel, message, latchLifetime(c), tokenBlockArg,
			entry, ms(recheckCap(c)), tombstone, k.grantPrefix, flag(reserved), resent}))
	if err != nil {
		return releaseReply{}, err
	}
	return parseReleaseReply(vals)
}

// request is one idempotent release: its id names the result latch that a
// retry reads, and sent records that an attempt went out, so that only a
// retry pays for reading the latch (a first attempt cannot find one).
type request struct {
	id   string
	sent bool
}

func newRequest(c *core.Client) *request { return &request{id: c.NewID()} }

// abandonScript runs abandon.lua for owner, queued (if at all) with lease and
// secret.
func abandonScript(ctx context.Context, c *core.Client, k keys, owner, secret string, lease time.Duration, tombstone bool) error {
	return lua.Abandon.Exec(ctx, c.Scripts, []string{k.lock, k.tombstone(owner), k.queue, k.waiters, k.fence},
		[]string{owner, ms(lease), publishCommand(ctx, c), k.channel, unlockMessage, tokenBlockArg, flag(tombstone), secret, k.grantPrefix,
			ms(c.Cfg.ClaimWindow)}).Error()
}

func forceUnlockScript(ctx context.Context, c *core.Client, k keys) (bool, error) {
	n, err := lua.ForceUnlock.Exec(ctx, c.Scripts, []string{k.lock, k.queue, k.waiters, k.fence},
		[]string{publishCommand(ctx, c), k.channel, unlockMessage, tokenBlockArg, k.grantPrefix}).AsInt64()
	return n == 1, err
}

// holdSpec is the spec of a hold of m (see core.HoldSpec). Its GiveBack
// frees the owner field in Redis when the hold lapses while a renewal or
// claim extension may have run, or when Close ends it: abandon frees it
// whatever its lease and count, and leaves another owner alone.
func (m *Mutex) holdSpec(owner string, token uint64, lease time.Duration, renew bool, count int64, late bool) core.HoldSpec {
	return core.HoldSpec{Kind: mutexKind, Name: m.name, Key: m.keys.lock, Owner: owner, Token: token, Lease: lease, Renew: renew,
		Count: count, LateAttempts: late, GiveBack: m.giveBack}
}

func (m *Mutex) giveBack(ctx context.Context, h *core.Hold) error {
	lease, _ := h.Lease()
	err := abandonScript(ctx, m.c, m.keys, h.Owner(), "-", lease, h.LateAttempts())
	m.c.NoteError(err)
	return err
}

// mutexKind renews Mutex holds for the watchdog.
var mutexKind = &core.Kind{Name: "mutex", Script: lua.Renew, Args: renewArgs}

// renewArgs are renew.lua's keys and args for a batch of holds.
func renewArgs(group []*core.Hold, lease time.Duration) (keys, args []string) {
	keys = make([]string, len(group))
	args = make([]string, 1, len(group)+1)
	args[0] = ms(lease)
	for i, h := range group {
		keys[i] = h.Key()
		args = append(args, h.Owner())
	}
	return keys, args
}

// abandon makes sure owner does not hold the lock, in the background: it is
// called when an acquisition's outcome is unknown, or when a waiter got the lock
// otherwise (passed on locally) and gives up its place in the queue. tombstone
// makes an acquire.lua for owner still in flight refuse it; it is not needed
// when none can be.
func abandon(c *core.Client, k keys, owner, secret string, lease time.Duration, tombstone bool) {
	c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error {
			err := abandonScript(ctx, c, k, owner, secret, lease, tombstone)
			c.NoteError(err)
			return err
		})
	})
}
