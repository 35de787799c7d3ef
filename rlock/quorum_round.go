package rlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/internal/mux"
)

// quietMessage is what a give-back publishes on a master's unlock channel
// instead of unlockMessage: an address no Waiter has, so it wakes no one. A
// give-back frees a master only for a moment in which no one held a
// majority; waking waiters for it would only have them, and the giver
// itself, take and give back that master again and again while a holder of
// the majority holds on.
const quietMessage = mux.AddressPrefix + "-"

// Retry delays of a blocking quorum Lock (see QuorumMutex.retryIn).
const (
	splitBackoff    = 4 * time.Millisecond // first delay after a split vote, doubled per split
	maxSplitBackoff = time.Second
)

type voteKind int8

const (
	voteFailed  voteKind = iota // no answer, or an error
	voteGranted                 // this master took the lock for the round's owner
	voteTaken                   // another owner holds it there
	// voteUnacked: this master took the lock, but too few of its replicas
	// acknowledged it (WithReplicaAck): it counts against, and is given back.
	voteUnacked
	voteUnasked // a round lost at its gate did not ask this master
)

// vote is one master's answer in one round.
type vote struct {
	kind   voteKind
	sent   core.Ticket // when the attempt was sent: the lease there starts later
	wait   int64       // voteTaken: the holder's remaining lease (ms), -1 without expiry
	holder string      // voteTaken: the holder's owner field
	err    error       // voteFailed, voteUnacked
	// late: the attempt may still run on that master (its reply was lost),
	// so it is given back with a tombstone against it.
	late bool
	// reserved (voteTaken at a gate): the lock was free there, but kept for
	// a caller that has waited longer, for wait ms at most.
	reserved bool
	arrival  string // gate asks: the caller's arrival there (see gateCall)
}

// round is one acquisition attempt under one owner field: on every master at
// once, or on a gate first (see quorum_gate.go).
type round struct {
	owner                  string
	lease                  time.Duration
	votes                  []vote
	granted, taken, failed int
	unacked                int // votes granted but not acknowledged (see voteUnacked)
	lastErr                error
	// refused counts the failed votes that were a master's refusal of the
	// Redis user (NOPERM, see core.Refused), refusal the last of them.
	refused    int
	refusal    error
	until      time.Time // granted >= majority: when the majority's validity ends
	won        bool
	gate       int  // the master asked first, -1 for none (see quorum_gate.go)
	lostAtGate bool // the gate was taken: no other master was asked
}

// refusedMajority reports whether so many masters refused the Redis user
// that no majority can be had until an administrator changes the ACL.
func (r *round) refusedMajority(n, major int) bool { return r.refused > n-major }

// notReplicated reports whether r lost only for want of acknowledgements
// (WithReplicaAck): counting the votes that too few replicas acknowledged, it
// would have had a majority.
func (r *round) notReplicated(major int) bool {
	return r.granted < major && r.granted+r.unacked >= major
}

// attemptTimeout bounds one attempt on one master for a hold of lease.
func (q *Quorum) attemptTimeout(lease time.Duration) time.Duration {
	return max(min(q.attempt, lease/4), MinAttemptTimeout)
}

// newOwner returns an owner field unique to this Quorum, the same on every
// master for one round.
func (q *Quorum) newOwner() string {
	return q.id + ":" + strconv.FormatUint(q.seq.Add(1), 10)
}

// round makes one acquisition attempt under a new owner field. A gated round
// (call not nil) asks its gate first and stops there if another owner holds
// it or it is kept for another caller; otherwise, and in a full round (call
// nil), it asks every master at once, and a gated round that took its gate
// but not a majority asks the others again for a while (see chase). It wins
// when a majority granted the lock and validity is left: the lease less the
// time since each grant was sent and the drift margin, for the majority whose
// leases end last. Whatever a round that did not win took is given back
// (quietly, see quietMessage); the call waits for the give-backs to the
// masters that answered for up to the attempt timeout, so that it leaves
// nothing behind on them. Masters whose answer was lost are given back in the
// background in any case, with a tombstone.
func (qm *QuorumMutex) round(ctx context.Context, lease time.Duration, call *gateCall) *round {
	q := qm.q
	r := &round{owner: q.newOwner(), lease: lease, votes: make([]vote, len(q.masters)), gate: -1}
	timeout := q.attemptTimeout(lease)
	if call != nil {
		r.gate = qm.gate()
		qm.moveGate(call, r.gate)
	}
	if r.gate >= 0 {
		v := qm.ask(ctx, q.masters[r.gate].c, r.owner, lease, timeout, call)
		r.votes[r.gate] = v
		call.heard(r.gate, v)
		switch {
		case v.kind == voteTaken || ctx.Err() != nil:
			for i := range r.votes {
				if i != r.gate {
					r.votes[i].kind = voteUnasked
				}
			}
			r.lostAtGate = v.kind == voteTaken
			r.count(ctx, q.major)
			qm.giveBackLost(r, timeout)
			return r
		case v.kind == voteFailed:
			// Down, or refusing the Redis user: either way the next round
			// meets at another gate, one that may grant.
			qm.gateFailed(r.gate)
		}
	}
	var wg sync.WaitGroup
	for i, mc := range q.masters {
		if i != r.gate {
			wg.Go(func() { r.votes[i] = qm.ask(ctx, mc.c, r.owner, lease, timeout, nil) })
		}
	}
	wg.Wait()
	r.count(ctx, q.major)
	if r.gate >= 0 && r.votes[r.gate].kind == voteGranted {
		qm.chase(ctx, r, timeout)
	}
	qm.giveBackLost(r, timeout)
	return r
}

// chase asks again, until timeout has passed, the masters another owner held
// when round r took its gate but not a majority. Their holder is most often
// the last one, whose releases are still on their way (it released the gate
// first), or one that took them out of line (a TryLock, a full round); r's
// owner is the one in line, so it keeps the gate rather than giving it back
// quietly and leaving the line asleep. It stops when too many masters failed
// for a majority, or a vote went unacknowledged; its asks end by the
// deadline too, and it keeps no later than a quarter of the lease after the
// gate's grant was sent, so that a chase that wins leaves most of the
// validity.
func (qm *QuorumMutex) chase(ctx context.Context, r *round, timeout time.Duration) {
	q := qm.q
	deadline := time.Now().Add(timeout)
	if limit := r.votes[r.gate].sent.At().Add(r.lease / 4); limit.Before(deadline) {
		deadline = limit
	}
	chaseCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for delay := time.Millisecond; !r.won && r.taken > 0 && r.failed <= len(q.masters)-q.major && r.unacked == 0; delay *= 2 {
		t := time.NewTimer(delay)
		select {
		case <-chaseCtx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if chaseCtx.Err() != nil {
			return
		}
		var wg sync.WaitGroup
		for i, v := range r.votes {
			if v.kind == voteTaken {
				wg.Go(func() { r.votes[i] = qm.ask(chaseCtx, q.masters[i].c, r.owner, r.lease, timeout, nil) })
			}
		}
		wg.Wait()
		r.count(ctx, q.major) // (a majority made at the deadline still wins)
	}
}

// count tallies r's votes and tells whether r won.
func (r *round) count(ctx context.Context, major int) {
	r.granted, r.taken, r.unacked, r.failed, r.refused = 0, 0, 0, 0, 0
	var ends []time.Time
	for _, v := range r.votes {
		switch v.kind {
		case voteGranted:
			r.granted++
			ends = append(ends, v.sent.At().Add(r.lease-core.DriftMargin(r.lease)))
		case voteTaken:
			r.taken++
		case voteUnacked:
			r.unacked++
		case voteFailed:
			r.failed++
			r.lastErr = v.err
			if err := core.Refused(v.err); errors.Is(err, ErrPermission) {
				r.refused++
				r.refusal = err
			}
		}
	}
	if r.granted >= major {
		slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
		r.until = ends[major-1]
		r.won = time.Until(r.until) > 0 && ctx.Err() == nil
	}
}

// giveBackLost gives back what r took and does not keep, waiting up to
// timeout for the masters that answered.
func (qm *QuorumMutex) giveBackLost(r *round, timeout time.Duration) {
	q := qm.q
	var done []<-chan struct{}
	for i, v := range r.votes {
		switch {
		case v.kind == voteGranted && !r.won || v.kind == voteUnacked:
			if d := qm.giveBack(q.masters[i].c, r.owner, r.lease, false); d != nil {
				done = append(done, d)
			}
		case v.late:
			qm.giveBack(q.masters[i].c, r.owner, r.lease, true)
		}
	}
	if len(done) == 0 {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, d := range done {
		select {
		case <-d:
		case <-t.C:
			return
		}
	}
}

// majority returns the owner that holds a majority of the masters r asked
// (its owner field, "" if the masters could not name it), with the remaining
// leases of its votes; ok is false when no one does (a split vote, or a holder
// taking or releasing the lock just then).
func (r *round) majority(major int) (holder string, waits []int64, ok bool) {
	byHolder := make(map[string][]int64)
	for _, v := range r.votes {
		if v.kind == voteTaken {
			byHolder[v.holder] = append(byHolder[v.holder], v.wait)
			if len(byHolder[v.holder]) >= major {
				holder, ok = v.holder, true
			}
		}
	}
	return holder, byHolder[holder], ok
}

// ask runs quorum_acquire.lua on one master, followed, with WithReplicaAck on
// that master's Client, by WAIT on the same connection: a vote the master's
// replicas did not acknowledge in time is voteUnacked. The attempt timeout
// then bounds the script, and the acknowledgement timeout the WAIT.
func (qm *QuorumMutex) ask(ctx context.Context, c *core.Client, owner string, lease, timeout time.Duration, call *gateCall) vote {
	keys, args := []string{qm.keys.lock, qm.keys.tombstone(owner), qm.keys.gate()}, []string{owner, ms(lease), "", "", "", "", "", ""}
	if call != nil {
		args[2], args[3], args[4], args[5] = call.id, call.arrival, ms(c.Cfg.NoExpiryPoll), ms(c.Cfg.ClaimWindow)
		args[6], args[7] = publishCommand(ctx, c), qm.keys.channel
	}
	if c.Acking() {
		return qm.askAcked(ctx, c, keys, args, timeout+c.Cfg.ReplicaAckTimeout)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := c.NewTicket()
	vals, err := lua.QuorumAcquire.Exec(actx, c.Scripts, keys, args).ToArray()
	if err != nil {
		c.NoteError(err)
		_, isRedis := rueidis.IsRedisErr(err)
		// A refused connection sent nothing; any other failure may hide a
		// script that ran, or that still will.
		return vote{err: err, late: !isRedis && !errors.Is(err, syscall.ECONNREFUSED)}
	}
	v, err := parseVote(vals)
	if err != nil {
		return vote{err: err}
	}
	v.sent = t
	return v
}

// askAcked is ask with WithReplicaAck (see core.Client.RunAcked).
func (qm *QuorumMutex) askAcked(ctx context.Context, c *core.Client, keys, args []string, timeout time.Duration) vote {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := c.NewTicket()
	var v vote
	acked, err := c.RunAcked(actx, lua.QuorumAcquireOn, keys, args, false, func(res rueidis.RedisResult) (bool, error) {
		vals, err := res.ToArray()
		if err != nil {
			return false, err
		}
		v, err = parseVote(vals)
		return err == nil && v.kind == voteGranted, err
	})
	switch {
	case err != nil && v.kind == voteGranted && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// The master granted the vote, and the attempt's own deadline ran
		// out in WAIT (a loaded server or client): Redis answered, its
		// replicas did not acknowledge in time.
		c.NoteError(err)
		return vote{kind: voteUnacked, err: c.NotReplicated(ctx, 0)}
	case err != nil:
		c.NoteError(err)
		_, isRedis := rueidis.IsRedisErr(err)
		// As in ask; and a vote granted before WAIT failed is given back
		// with a tombstone too.
		late := v.kind == voteGranted || !isRedis && !errors.Is(err, syscall.ECONNREFUSED)
		return vote{err: err, late: late}
	case v.kind == voteGranted && c.Unacked(acked) && ctx.Err() != nil:
		// WAIT was cut short by ctx (a chase's deadline, say), not by the
		// acknowledgement timeout: the replicas are not known to lag.
		return vote{err: ctx.Err(), late: true}
	case v.kind == voteGranted && c.Unacked(acked):
		return vote{kind: voteUnacked, err: c.NotReplicated(ctx, acked)}
	}
	v.sent = t
	return v
}

func parseVote(vals []rueidis.RedisMessage) (vote, error) {
	if len(vals) == 0 {
		return vote{}, errors.New("rlock: empty quorum acquire reply")
	}
	status, err := vals[0].AsInt64()
	if err != nil {
		return vote{}, fmt.Errorf("rlock: unexpected quorum acquire reply: %w", err)
	}
	switch {
	case status == 1 && len(vals) == 1:
		return vote{kind: voteGranted}, nil
	case status == 0 && (len(vals) == 3 || len(vals) == 4):
		wait, err1 := vals[1].AsInt64()
		holder, err2 := vals[2].ToString()
		var arrival string
		var err3 error
		if len(vals) == 4 {
			arrival, err3 = vals[3].ToString()
		}
		if err1 == nil && err2 == nil && err3 == nil && wait >= -1 {
			return vote{kind: voteTaken, wait: wait, holder: holder, arrival: arrival}, nil
		}
	case status == 3 && len(vals) == 3:
		wait, err1 := vals[1].AsInt64()
		arrival, err2 := vals[2].ToString()
		if err1 == nil && err2 == nil && wait >= 0 {
			return vote{kind: voteTaken, wait: wait, reserved: true, arrival: arrival}, nil
		}
	case status == -2 && len(vals) == 1:
		// Cannot happen: every round has a new owner field.
		return vote{}, errors.New("rlock: quorum owner field found abandoned")
	}
	return vote{}, fmt.Errorf("rlock: unexpected quorum acquire reply of %d elements, status %d", len(vals), status)
}

// giveBack frees owner's vote on one master in the background (abandon.lua:
// idempotent, and with tombstone set it also refuses an attempt of owner that
// runs late). It announces nothing (see quietMessage). It returns a channel
// closed when the give-back is done, or nil when the Client is closing (the
// vote then expires with its lease).
func (qm *QuorumMutex) giveBack(c *core.Client, owner string, lease time.Duration, tombstone bool) <-chan struct{} {
	done := make(chan struct{})
	k := qm.keys
	ok := c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
		defer close(done)
		_ = core.RetryTransient(ctx, func() error {
			err := lua.Abandon.Exec(ctx, c.Scripts, []string{k.lock, k.tombstone(owner), k.queue, k.waiters, k.fence},
				[]string{owner, ms(lease), publishCommand(ctx, c), k.channel, quietMessage, tokenBlockArg, flag(tombstone), "-", k.grantPrefix,
					ms(c.Cfg.ClaimWindow)}).Error()
			c.NoteError(err)
			return err
		})
	})
	if !ok {
		return nil
	}
	return done
}

// retryIn is how long a blocking Lock sleeps after round r failed, unless a
// master announces a release first. splits counts the split votes in a row.
//   - Too many masters could not be reached for a majority: backoff, as for
//     any connection error (handled by the caller).
//   - Lost at the gate: until the gate's holder's lease runs out (the caller
//     shortens it when that holder is not known to hold a majority).
//   - One owner holds a majority: until that majority's leases would run
//     out, when fewer than a majority of its keys remain (a release is
//     announced before that).
//   - No one holds a majority (a split vote between contenders, or a holder
//     taking or releasing the lock just then): a short random delay, doubled
//     with each split in a row, so that contenders fall out of step; bounded
//     by the first of the leases seen to run out.
func (qm *QuorumMutex) retryIn(r *round, splits *int) time.Duration {
	q := qm.q
	c := q.masters[0].c
	if r.lostAtGate {
		return c.RetryAfter(r.votes[r.gate].wait)
	}
	if _, waits, ok := r.majority(q.major); ok {
		*splits = 0
		slices.SortFunc(waits, func(a, b int64) int {
			switch { // no expiry (-1) lasts longest
			case a == b:
				return 0
			case a < 0 || (b >= 0 && a > b):
				return -1
			}
			return 1
		})
		return c.RetryAfter(waits[q.major-1])
	}
	var first int64 = -1
	for _, v := range r.votes {
		if v.kind == voteTaken && v.wait >= 0 && (first < 0 || v.wait < first) {
			first = v.wait
		}
	}
	*splits++
	b := min(splitBackoff<<min(*splits-1, 16), maxSplitBackoff)
	d := b/2 + rand.N(b/2+1)
	if first >= 0 {
		d = min(d, c.RetryAfter(first))
	}
	return d
}
