package rlock

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

// Holder is one holder of a lock (or of semaphore permits) as Redis records
// it at the moment of an inspection.
type Holder struct {
	// Owner is the owner field (a semaphore's permit id): the holder's
	// Client id, ':' and a number that Client gave the hold.
	Owner string
	// ClientID is the Client.ID of the Client that holds.
	ClientID string
	// Count is the hold count: re-entries of a Mutex or RWMutex hold, the
	// permits a semaphore holder has.
	Count int64
	// Token is the hold's fencing token as Redis granted it: for a Mutex,
	// the token of the grant that made this owner field the holder (an
	// acquisition, a hand-off, or its Client keeping the lock after an
	// Unlock for a goroutine of its own), the first of the block of tokens
	// that grant reserved; for an RWMutex writer, its token; for RWMutex
	// readers, the token they share (the fencing counter). A Mutex hold
	// passed on within its Client (to another goroutine waiting in the same
	// process, without Redis) takes the next tokens of that block, so the
	// goroutine holding now may have a token above Token, and at most
	// LockInfo.Fence. 0 for semaphores, which have none, and for a Mutex
	// whose hash does not record it (taken by an older version of this
	// module, or a quorum lock).
	Token uint64
	// LeaseLeft is the time left before the hold expires unless renewed
	// (-1: no expiry), by the server's clock. It may be negative for an
	// RWMutex reader or semaphore holder whose lease ran out and that no
	// script has reclaimed yet: it holds nothing any more.
	LeaseLeft time.Duration
	// Claim reports that the hold is a claim not yet extended: the lock was
	// handed to a queued waiter for the claim window only (WithClaimWindow,
	// shorter than the lease), and nothing has set the whole lease since
	// (the new holder's Client extends it with its next renewal). LeaseLeft
	// is then at most the claim window; a holder whose Client does not
	// extend it in time (paused, or stuck) loses the lock when it runs out.
	// Redis records it for every kind of holder. For a Mutex holder and an
	// RWMutex writer, the grant writes the claim's end into the hash and
	// sets the hash to expire at exactly that time, and any lease set since
	// moves the expiry past it. For RWMutex readers and semaphore holders,
	// whose leases are end times in a sorted set, the grant scores the
	// claim's end less half a millisecond, and any lease set since a whole
	// millisecond.
	Claim bool
}

// Waiter is one place in a lock's (or semaphore's) queue, at the moment of
// an inspection. Durations are measured on the server's clock.
type Waiter struct {
	// Owner is the waiter's owner field (a semaphore's permit id).
	Owner string
	// ClientID is the Client.ID of the waiting Client.
	ClientID string
	// Mode is "read" or "write" for an RWMutex waiter, "" otherwise.
	Mode string
	// Permits is the number of permits a semaphore waiter asks for, 0
	// otherwise.
	Permits int64
	// Waited is how long ago the waiter took its current place: its arrival
	// number is the server clock in microseconds when it queued, or, when
	// places were taken faster than one per microsecond (or the clock was
	// stepped back), slightly later than that, so Waited may be short by as
	// much. A waiter whose place lapsed and that queued again counts from
	// its new place. -1 when unknown (a place numbered by an older version).
	Waited time.Duration
	// LapsesIn is the time left until the waiter loses its place unless it
	// re-checks before (its deadline: the latest re-check it announced plus
	// a grace of its lease, 2s at least; a live waiter re-checks well before
	// and pushes it back). Negative: it lapsed and the next script on the
	// lock drops it. -1 exactly when unknown (no deadline recorded).
	LapsesIn time.Duration
}

// LockInfo is a Mutex as Inspect found it. Fields read in one script, so
// they are consistent with each other, but may have changed by the time the
// caller reads them.
type LockInfo struct {
	Name string
	// Holder is the holder, nil when the lock is free.
	Holder *Holder
	// Fence is the highest token reserved so far: the fencing counter, or
	// while an uncontended holder keeps its tokens in its own hash, the
	// last of them (0 when neither is left: the counter expired and no one
	// holds). Holder.Token is at most Fence, and so is the token
	// of any goroutine holding the lock now (see Holder.Token): a block of
	// tokens reserved for the holder to pass on ends at Fence.
	Fence uint64
	// Queued is the number of waiters in the queue; Waiters lists them from
	// the head (at most 1000).
	Queued  int
	Waiters []Waiter
}

// Inspect reads the Mutex's holder and queue in one round trip, changing
// nothing. On success the LockInfo reflects one instant of Redis; on failure
// (an invalid name, a closed Client, Redis unreachable or an unexpected
// reply) it is zero and the error says which.
func (m *Mutex) Inspect(ctx context.Context) (LockInfo, error) {
	if err := m.usableWith(ctx); err != nil {
		return LockInfo{}, err
	}
	k := m.keys
	var info LockInfo
	err := m.c.Inspect(ctx, func(ctx context.Context) (err error) {
		res := lua.Inspect.Exec(ctx, m.c.RC, []string{k.lock, k.fence, k.queue, k.waiters}, []string{strconv.Itoa(core.InspectMax)})
		info, err = parseLockInfo(m.name, res)
		return err
	})
	if err != nil {
		return LockInfo{}, m.wrap("inspect", err)
	}
	return info, nil
}

func parseLockInfo(name string, res rueidis.RedisResult) (LockInfo, error) {
	strs, lists, err := core.InspectReply(res, 8)
	if err != nil {
		return LockInfo{}, err
	}
	nums, err := ints([]string{strs[0], strs[1], strs[2], strs[3], strs[6]})
	if err != nil {
		return LockInfo{}, err
	}
	info := LockInfo{Name: name, Fence: uint64(max(nums[2], 0)), Queued: int(nums[3])}
	if h := lists[4]; len(h) >= 2 {
		n, err := core.Int(h[1])
		if err != nil {
			return LockInfo{}, err
		}
		info.Holder = &Holder{Owner: h[0], ClientID: core.ClientOf(h[0]), Count: n, Token: uint64(max(nums[4], 0)),
			LeaseLeft: core.LeaseOf(nums[1]), Claim: strs[7] == "1"}
	}
	info.Waiters, err = waiters(nums[0], lists[5])
	return info, err
}

func ints(strs []string) ([]int64, error) {
	nums := make([]int64, len(strs))
	for i, s := range strs {
		n, err := core.Int(s)
		if err != nil {
			return nil, err
		}
		nums[i] = n
	}
	return nums, nil
}

func waiters(nowUS int64, items []string) ([]Waiter, error) {
	cw, err := core.ParseWaiters(nowUS, items)
	if err != nil {
		return nil, err
	}
	ws := make([]Waiter, len(cw))
	for i, w := range cw {
		ws[i] = Waiter(w)
	}
	return ws, nil
}
