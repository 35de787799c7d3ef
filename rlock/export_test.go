package rlock

import (
	"context"
	"time"

	"github.com/relockio/relock/internal/core"
)

// ReleaseWithRequestID releases one level of the hold carried by lockCtx as
// Unlock does, but under the given release request id, so that a test can
// replay a request the way a retry inside Unlock does (every call reads the
// request's result latch, as a retry does).
func ReleaseWithRequestID(m *Mutex, lockCtx context.Context, id string) error {
	h := m.holdOf(lockCtx)
	if h == nil {
		return ErrNotHeld
	}
	return m.releaseAs(lockCtx, h, &request{id: id, sent: true}, releaseTurn)
}

// ReleaseScript runs release.lua once for the owner of the hold carried by
// lockCtx, under request id, bypassing the client-side state of the hold: it
// is exactly what a retry inside Unlock sends after the reply of the first
// attempt was lost. It returns the script's answer: the hold count left, or -1
// when the owner does not hold the lock.
func ReleaseScript(ctx context.Context, m *Mutex, lockCtx context.Context, id string) (int64, error) {
	return releaseScriptSent(ctx, m, lockCtx, &request{id: id, sent: true})
}

// NewReleaseScript is ReleaseScript for a new request: its first attempt.
func NewReleaseScript(ctx context.Context, m *Mutex, lockCtx context.Context, id string) (int64, error) {
	return releaseScriptSent(ctx, m, lockCtx, &request{id: id})
}

func releaseScriptSent(ctx context.Context, m *Mutex, lockCtx context.Context, req *request) (int64, error) {
	h := m.holdOf(lockCtx)
	if h == nil {
		return 0, ErrNotHeld
	}
	lease, _ := h.Lease()
	r, err := releaseScript(ctx, m.c, m.keys, h.Owner(), req, lease, nil, false)
	return r.left, err
}

// WaitingInClient returns how many Lock calls of c wait for the lock name as
// its cohort (see core.Turns): the leader queued in Redis and those waiting
// in c behind it.
func WaitingInClient(c *Client, name string) int { return c.t.Waiting(name) }

// WatchSignalled reports whether the listener of c's cohort for the lock name
// (see core.TurnWatch) has heard a message addressed to its owner field.
func WatchSignalled(c *Client, name string) bool { return c.t.Heard(name) }

// CohortHeld reports whether a hold of c owns the lock name as a cohort that
// may pass it on locally.
func CohortHeld(c *Client, name string) bool { return c.t.Held(name) }

// AcquireScript runs acquire.lua once for a first acquisition by owner,
// without queueing, and returns its decoded reply (status, token, count).
func AcquireScript(ctx context.Context, m *Mutex, owner string, lease time.Duration) (status int64, token uint64, count int64, err error) {
	r, err := acquireScript(ctx, m.c, m.keys, acquireArgs{owner: owner, secret: "00", lease: lease})
	return r.status, r.token, r.count, err
}

// Parked reports whether c keeps the lock name for its next Lock after the
// last Unlock (see core.Turns.Park).
func Parked(c *Client, name string) bool { return c.t.Parked(name) }

// TurnBudget is the most holds one Client gets per turn: its acquisition in
// Redis and the passes after it (see core.TurnMaxPasses).
const TurnBudget = 1 + core.TurnMaxPasses

// QuorumLiveMasters returns on how many masters the quorum hold carried by
// lockCtx is still held, as its Client knows (-1 when it carries none).
func QuorumLiveMasters(qm *QuorumMutex, lockCtx context.Context) int {
	qh := qm.holdOf(lockCtx)
	if qh == nil {
		return -1
	}
	qh.mu.Lock()
	defer qh.mu.Unlock()
	return qh.live
}

// QueuedFence runs acquire.lua once for a first acquisition by owner, without
// queueing, and returns its status and, when the lock was taken by another,
// the fencing counter it reported (see acquireReply.fence).
func QueuedFence(ctx context.Context, m *Mutex, owner string, lease time.Duration) (status int64, fence uint64, err error) {
	r, err := acquireScript(ctx, m.c, m.keys, acquireArgs{owner: owner, secret: "00", lease: lease})
	return r.status, r.fence, err
}

// Holding reports whether a live Mutex hold of c is on the lock name.
func Holding(c *Client, name string) bool {
	return c.c.Holding(mutexKind, c.Mutex(name).keys.lock)
}

// HoldCount returns how many holds of c are live.
func HoldCount(c *Client) int { return c.c.HoldCount() }

// TokenBlock is how many fencing tokens a contended acquisition reserves.
const TokenBlock = tokenBlock

// QuorumGate is the master gated rounds of qm ask first while none failed
// lately (see quorum_gate.go).
func QuorumGate(qm *QuorumMutex) int { return qm.gateFrom }

// EndTurn spends what is left of the turn of m's Client, so that its next
// release goes through Redis.
func EndTurn(m *Mutex) { m.t.EndTurn(m.name) }
