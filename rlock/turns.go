package rlock

import (
	"strconv"

	"github.com/relockio/relock/internal/core"
)

// Lock cohorting and turns (see core.Turns, which does both for every kind):
// the goroutines of one Client that wait for a lock queue in Redis as one,
// and a hold at its last Unlock passes the lock to the oldest of them without
// a round trip, or keeps it for the Client's next Lock for the linger
// (WithLinger).
//
// What is the Mutex's own: the new holder takes over the owner field and the
// next of a block of fencing tokens that the Redis acquisition reserved, so
// tokens still rise strictly from holder to holder, across processes too. The
// release that ends a turn queues the oldest local waiter at the tail of the
// Redis queue in the same script (or, when no one else is queued, keeps the
// lock for the Client and reserves new tokens instead, so an uncontested
// Client pays one script per turn), and reserves a place for a Lock the
// Client expects (see core.Turns.Reserve).
//
// A pass is made only while the hold is confirmed (no connection error seen
// since the command that last confirmed it was sent: a restart, a lost
// reply), the lock's channel has stayed subscribed since before the
// acquisition, and no message addressed to the owner field arrived
// (ForceUnlock sends one): the watch the hold's turn takes (see
// acquisition.listen). What remains is the time a ForceUnlock message, or the
// loss of the connection, takes to reach the Client: a pass made in that
// window gives the next goroutine a token below the new holder's (see the
// package documentation).
//
// Only holds with the watchdog's lease take part: a WithLease hold keeps its
// own fixed lease, which a hand-off could not honour.

// tokenBlock fencing tokens are reserved by a contended acquisition: one for
// the holder and one per possible local hand-off.
const tokenBlock = core.TurnMaxPasses + 1

var tokenBlockArg = strconv.Itoa(tokenBlock)

type (
	localWaiter = core.TurnWaiter
	cohortPass  = core.Pass
	promotion   = core.Promotion
)

// mutexTurn is a Mutex as its Client's turns see it (core.Reserver).
type mutexTurn Mutex

// turn returns m as its Client's turns see it.
func (m *Mutex) turn() *mutexTurn { return (*mutexTurn)(m) }

func (l *mutexTurn) TurnName() string { return l.name }

// GiveBack releases a lock passed on that no Lock call took up: to the head
// waiter, or free.
func (l *mutexTurn) GiveBack(p *core.Pass) {
	abandon(l.c, l.keys, p.Owner, "-", p.Lease, p.Late)
}

// GiveUpPlace gives up a place a release queued for a Lock that never came
// (or may still queue: uncertain leaves a tombstone).
func (l *mutexTurn) GiveUpPlace(p *core.Promotion, uncertain bool) {
	abandon(l.c, l.keys, p.Owner, p.Secret, l.c.Cfg.WatchdogTimeout, uncertain)
}
