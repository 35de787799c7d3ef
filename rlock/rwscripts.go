package rlock

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

// rwKeys names everything one RWMutex owns in Redis (see rw_lib.lua). All of
// it shares the hash tag {name}, under a stem of its own (":rw"), so that a
// Mutex or semaphore of the same name is another lock.
type rwKeys struct {
	writer  string // hash: the writer's owner field -> count, 't' -> token
	readers string // zset: reader owner field -> lease expiry
	counts  string // hash: reader owner field -> count (readers + ":n")
	queue   string // zset: waiter entry -> arrival number
	waiters string // zset: waiter entry -> deadline
	seq     string // arrival counter
	fence   string // fencing counter
	readCh  string // readers granted together are told so here (see readTag)
	// grants is this Client's grant channel, where its writers are woken;
	// grantPrefix is that of every Client.
	grants      string
	grantPrefix string
}

func newRWKeys(prefix, name, clientID string) rwKeys {
	base := core.Base(prefix, name) + ":rw"
	return rwKeys{
		writer:      base,
		readers:     base + ":r",
		counts:      base + ":r:n",
		queue:       base + ":queue",
		waiters:     base + ":waiters",
		seq:         base + ":seq",
		fence:       base + ":fence",
		readCh:      base + ":read",
		grants:      core.GrantChannel(base, clientID),
		grantPrefix: core.GrantChannelPrefix(base),
	}
}

// countsKey is the reader counts hash beside a readers zset (a read hold's Key).
func countsKey(readers string) string { return readers + ":n" }

// fenceKey is the fencing counter beside a readers zset (a read hold's Key).
func fenceKey(readers string) string { return strings.TrimSuffix(readers, ":r") + ":fence" }

func (k rwKeys) latch(requestID string) string { return k.writer + ":latch:" + requestID }

func (k rwKeys) tombstone(owner string) string { return k.writer + ":gone:" + owner }

// with returns the seven keys every RWMutex script but rw_renew.lua takes
// first, followed by extra.
func (k rwKeys) with(extra ...string) []string {
	return append([]string{k.writer, k.readers, k.counts, k.queue, k.waiters, k.seq, k.fence}, extra...)
}

func modeArg(write bool) string {
	if write {
		return "w"
	}
	return "r"
}

// rwAcquireArgs is one call of rw_acquire.lua.
type rwAcquireArgs struct {
	owner   string
	secret  string // the waiter's secret, part of its queue entry
	write   bool
	lease   time.Duration
	enqueue bool   // join (or stay in) the queue when not acquired
	via     string // owner field of the caller's write hold, for a read lock
	reentry string // request id of a re-entry; "" for a first acquisition
	// persist: with WithReplicaAck, repeat WAIT while ctx lasts rather than
	// give the acquisition back (see core.Client.RunAcked).
	persist bool
}

// rwAcquireReply is rw_acquire.lua's answer.
type rwAcquireReply struct {
	status int64 // 1 acquired, 0 not, -1 hold (or the write hold under it) gone, -2 abandoned owner
	token  uint64
	count  int64
	wait   int64 // ms worth waiting before re-checking, -1: no expiry
	// arrival is the arrival number of the place a queued attempt holds (0:
	// it did not queue): only a grant naming it was made after the attempt.
	arrival uint64
	// acked is how many replicas acknowledged an acquisition (WAIT, with
	// WithReplicaAck; -1 when none was asked).
	acked int64
}

func parseRWAcquireReply(vals []int64) (rwAcquireReply, error) {
	switch {
	case len(vals) == 3 && vals[0] == 1 && vals[1] >= 0 && vals[2] >= 1:
		return rwAcquireReply{status: 1, token: uint64(vals[1]), count: vals[2]}, nil
	case len(vals) == 3 && vals[0] == 0 && vals[1] >= -1 && vals[2] >= 0:
		return rwAcquireReply{wait: vals[1], arrival: uint64(vals[2])}, nil
	case len(vals) == 1 && (vals[0] == -1 || vals[0] == -2):
		return rwAcquireReply{status: vals[0]}, nil
	}
	return rwAcquireReply{}, fmt.Errorf("rlock: unexpected rwmutex acquire reply %v", vals)
}

func rwAcquireScript(ctx context.Context, c *core.Client, k rwKeys, a rwAcquireArgs) (rwAcquireReply, error) {
	latch := k.writer // unused unless re-entering
	if a.reentry != "" {
		latch = k.latch(a.reentry)
	}
	keys := k.with(k.tombstone(a.owner), latch)
	args := []string{a.owner, modeArg(a.write), ms(a.lease), flag(a.reentry != ""), flag(a.enqueue), ms(recheckCap(c)),
		publishCommand(ctx, c), k.readCh, k.grantPrefix, a.via, latchLifetime(c), ms(c.Cfg.ClaimWindow), a.secret}
	if c.Acking() {
		// WithReplicaAck: WAIT after an acquisition, on its connection. A
		// grant written by a releaser is covered too: rw_acquire.lua, which
		// finds it, sets its lease afresh (a write of this connection).
		var r rwAcquireReply
		acked, err := c.RunAcked(ctx, lua.RWAcquireOn, keys, args, a.persist, func(res rueidis.RedisResult) (bool, error) {
			vals, err := lua.Ints(res)
			if err != nil {
				return false, err
			}
			r, err = parseRWAcquireReply(vals)
			return err == nil && r.status == 1, err
		})
		r.acked = acked
		return r, err
	}
	vals, err := lua.Ints(lua.RWAcquire.Exec(ctx, c.Scripts, keys, args))
	if err != nil {
		return rwAcquireReply{}, err
	}
	r, err := parseRWAcquireReply(vals)
	r.acked = -1
	return r, err
}

// rwReleaseScript runs rw_release.lua: it returns the levels left, or -1 when
// owner holds no such hold. bury leaves a tombstone of owner when the hold
// ends: an acquisition attempt of it may still run late. req is the
// release's request: only a retry reads its latch.
func rwReleaseScript(ctx context.Context, c *core.Client, k rwKeys, owner string, write bool, req *request, lease time.Duration, bury bool) (int64, error) {
	tombstone := "0"
	if bury {
		tombstone = ms(c.Cfg.WatchdogTimeout)
	}
	resent := flag(req.sent)
	req.sent = true
	vals, err := lua.Ints(lua.RWRelease.Exec(ctx, c.Scripts, k.with(k.latch(req.id), k.tombstone(owner)),
		[]string{owner, modeArg(write), ms(lease), publishCommand(ctx, c), k.readCh, k.grantPrefix, latchLifetime(c), tombstone,
			resent}))
	if err != nil {
		return 0, err
	}
	if len(vals) != 1 || vals[0] < -1 {
		return 0, fmt.Errorf("rlock: unexpected rwmutex release reply %v", vals)
	}
	return vals[0], nil
}

// rwAbandonScript runs rw_abandon.lua for owner, queued (if at all) with
// lease and secret ("-" for a hold that never queued under its owner field).
func rwAbandonScript(ctx context.Context, c *core.Client, k rwKeys, owner, secret string, write bool, lease time.Duration, tombstone bool) error {
	return lua.RWAbandon.Exec(ctx, c.Scripts, k.with(k.tombstone(owner)),
		[]string{owner, modeArg(write), ms(lease), flag(tombstone), publishCommand(ctx, c), k.readCh, k.grantPrefix,
			ms(c.Cfg.ClaimWindow), secret}).Error()
}

// rwAbandon makes sure owner neither holds nor waits, in the background: the
// outcome of its acquisition is unknown, or it stops waiting.
func rwAbandon(c *core.Client, k rwKeys, owner, secret string, write bool, lease time.Duration, tombstone bool) {
	c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error {
			err := rwAbandonScript(ctx, c, k, owner, secret, write, lease, tombstone)
			c.NoteError(err)
			return err
		})
	})
}

// Write holds live in a Mutex-shaped hash (owner field -> count), which
// renew.lua renews; read holds each have a lease of their own in the readers
// zset, which rw_renew.lua renews.
var (
	rwWriteKind = &core.Kind{Name: "rwmutex-write", Script: lua.Renew, Args: renewArgs}
	rwReadKind  = &core.Kind{Name: "rwmutex-read", Script: lua.RWRenew, Args: rwRenewArgs}
)

// rwRenewArgs are rw_renew.lua's keys and args for a batch of read holds.
func rwRenewArgs(group []*core.Hold, lease time.Duration) (keys, args []string) {
	keys = make([]string, 0, 3*len(group))
	args = make([]string, 1, len(group)+1)
	args[0] = ms(lease)
	for _, h := range group {
		keys = append(keys, h.Key(), countsKey(h.Key()), fenceKey(h.Key()))
		args = append(args, h.Owner())
	}
	return keys, args
}

// readTag is the tag every reader waiter of an RWMutex takes on the lock's
// read channel (RW_READ_TAG in rw_lib.lua): readers granted together are
// told so by one message addressed to it, in which each finds its own proof,
// and the readers left at the head of the queue are told when those grants'
// claims lapse. No owner id is spelt so.
const readTag = "r"

// parseWriteGrant decodes the data of a message granting the write lock to a
// queued writer (see rw_lib.lua): a proof (see core.ParseGrant) of the
// writer's fencing token, for the place arrival, which the writer's last
// check saw (a grant to another place, read late, is not for this attempt).
func parseWriteGrant(data, secret string, arrival uint64) (token uint64, ok bool) {
	g, ok := core.ParseGrant(data, secret, 1)
	if !ok || arrival == 0 || g.Arrival != arrival || g.Fields[0] == 0 {
		return 0, false
	}
	return g.Fields[0], true
}

// parseReadGrant finds in the data of a message granting the read lock to
// readers queued together (see rw_lib.lua), space-separated proofs, the one
// for the place arrival, which the reader's last check saw, and checks it as
// parseWriteGrant does. ok is false when the message grants nothing to that
// place (the reader was not in the batch) or does not prove it.
func parseReadGrant(data, secret string, arrival uint64) (token uint64, ok bool) {
	if arrival == 0 {
		return 0, false
	}
	a := strconv.FormatUint(arrival, 10) + ":"
	for data != "" {
		var proof string
		proof, data, _ = strings.Cut(data, " ")
		if strings.HasPrefix(proof, a) {
			return parseWriteGrant(proof, secret, arrival)
		}
	}
	return 0, false
}
