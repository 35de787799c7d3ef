package rlock

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

// The gate of a quorum lock orders its contenders. Rounds that ask every
// master at once split the votes whenever several contenders wake together
// (at every release): each takes some masters, none a majority, all give
// back and retry after a random delay. A gated round asks one master first,
// the gate, and the others only once the gate granted it: contenders meet at
// the gate, one master decides, and the losers touch nothing else. A waiter
// that loses at the gate keeps its place in line there (the reservation of
// quorum_acquire.lua), so that the free lock goes to the one that has waited
// longest, not to a holder that releases and asks again at once.
//
// The gate is the first master, counting from one derived from the lock's
// name (so that many locks spread their gates over the masters), that has
// not lately failed to answer: a master that failed is passed over for
// gateRetry, by every lock of the Quorum, so that contenders meet at the next
// one while it is out. Contenders in other processes meet at the same gate
// only if they list the masters in the same order; if they do not, rounds
// split as they would without a gate, and the random delay sorts them out.
//
// What a gated round gives up is the view of the other masters: the gate's
// holder may be a contender that crashed between its gate and the others,
// holding no majority. So a waiter that lost at the gate to a holder not
// known to hold a majority makes a full round (every master at once) when
// gateStall passes without a release being announced; a full round also
// tells whether that holder has a majority, after which the waiter sleeps
// until a release or the end of that majority's leases, as before.
const gateRetry = time.Second

// gateStart is the master a gated round of the lock called name asks first,
// unless it failed lately (see gate).
func gateStart(name string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// gate returns the master a round asks first, or -1 when every master failed
// lately (the round then asks all at once).
func (qm *QuorumMutex) gate() int {
	q := qm.q
	now := time.Now().UnixNano()
	for k := range q.masters {
		i := (qm.gateFrom + k) % len(q.masters)
		if q.gateDown[i].Load() <= now {
			return i
		}
	}
	return -1
}

// gateFailed passes over master i as a gate for gateRetry.
func (qm *QuorumMutex) gateFailed(i int) {
	qm.q.gateDown[i].Store(time.Now().Add(gateRetry).UnixNano())
}

// gateStall is how long a waiter that lost at the gate to a holder not known
// to hold a majority waits for a release before it looks at every master: a
// live contender's round, its gate ask, its other asks, its chase and its
// give-backs (an attempt timeout each at most, and the acknowledgements'),
// ends within it.
func (q *Quorum) gateStall(lease time.Duration) time.Duration {
	d := 5 * q.attemptTimeout(lease)
	if c := q.masters[0].c; c.Acking() {
		d += 3 * c.Cfg.ReplicaAckTimeout
	}
	return d
}

// stuckHolder returns the holder of the gate that full round r saw hold no
// majority (one that took the gate and vanished, or one still chasing the
// rest, or one that lost its round and has yet to give the gate back), or "":
// the next round looks at every master again, and the one after it at the
// gate only once a full round saw the gate free or held by another.
func (qm *QuorumMutex) stuckHolder(r *round) string {
	g := qm.gate()
	if g < 0 || r.votes[g].kind != voteTaken || heldByMajority(r, r.votes[g].holder, qm.q.major) {
		return ""
	}
	return r.votes[g].holder
}

// heldByMajority reports whether round r saw holder hold a majority.
func heldByMajority(r *round, holder string, major int) bool {
	if r == nil {
		return false
	}
	h, _, ok := r.majority(major)
	return ok && h == holder && holder != ""
}

// gateCall is what one blocking Lock call keeps between its gated rounds: the
// id and arrival under which it waits in line at the gate (see
// quorum_acquire.lua), and where it may hold the gate's reservation.
type gateCall struct {
	id      string
	arrival string // server ms of its first loss at gate, "" before one
	gate    int    // the gate of that arrival
	queued  bool   // a loss at gate may have made it the reserved caller
}

// moveGate starts call afresh at gate when its arrival was at another one
// (an arrival there means nothing here), giving up, in the background, the
// place it may hold there.
func (qm *QuorumMutex) moveGate(call *gateCall, gate int) {
	if call.arrival == "" || call.gate == gate {
		return
	}
	qm.leaveGate(call)
	call.arrival, call.queued = "", false
}

// heard keeps what the gate's vote v told call.
func (call *gateCall) heard(gate int, v vote) {
	switch {
	case call == nil:
		return
	case v.kind == voteGranted:
		call.queued = false // a reservation of its own is gone with the grant
		return
	case v.arrival == "":
		return
	}
	call.arrival, call.gate = v.arrival, gate
	if v.kind == voteTaken && !v.reserved {
		call.queued = true
	}
}

// leaveGate gives up, in the background, the place a Lock call that ends
// may hold at its gate, so that the next caller need not wait for the claim
// window (see quorum_acquire.lua).
func (qm *QuorumMutex) leaveGate(call *gateCall) {
	if !call.queued {
		return
	}
	c := qm.q.masters[call.gate].c
	key, id := qm.keys.gate(), call.id
	c.GoUntil(time.Now().Add(c.Cfg.UnlockTimeout), func(ctx context.Context) {
		_ = core.RetryTransient(ctx, func() error {
			err := lua.QuorumLeave.Exec(ctx, c.Scripts, []string{key}, []string{id}).Error()
			c.NoteError(err)
			return err
		})
	})
}
