package semaphore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/rlock"
)

// Info is a semaphore as Inspect found it, read in one script (so consistent
// with itself, though it may have changed since).
type Info struct {
	Name string
	// Limit is the limit in Redis, 0 when none is set.
	Limit int64
	// Used is the number of permits Redis counts as held. It may include
	// leases that ran out and that no script has reclaimed yet (their
	// holders have a negative LeaseLeft).
	Used int64
	// Holders are the permit holders, by lease expiry (at most 1000;
	// NumHolders counts them all): Owner is the permit id, Count the permits
	// it holds, Token 0 (semaphores have no fencing token), Claim true for
	// permits handed to a waiter for its claim window and not yet extended
	// (see rlock.Holder).
	Holders    []rlock.Holder
	NumHolders int
	// Queued counts the waiters; Waiters lists them from the head (at most
	// 1000), each with the Permits it asks for.
	Queued  int
	Waiters []rlock.Waiter
}

// Inspect reads the semaphore's limit, holders and queue in one round trip,
// changing nothing. On failure (an invalid name, a closed Client, Redis
// unreachable or an unexpected reply) the Info is zero and the error says
// which.
func (s *Semaphore) Inspect(ctx context.Context) (Info, error) {
	if ctx == nil {
		return Info{}, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := s.usable(); err != nil {
		return Info{}, err
	}
	var info Info
	err := s.c.Inspect(ctx, func(ctx context.Context) (err error) {
		res := lua.SemInspect.Exec(ctx, s.c.RC, s.keys.common(), []string{strconv.Itoa(core.InspectMax)})
		info, err = parseInfo(s.name, res)
		return err
	})
	if err != nil {
		return Info{}, s.wrap("inspect", err)
	}
	return info, nil
}

func parseInfo(name string, res rueidis.RedisResult) (Info, error) {
	strs, lists, err := core.InspectReply(res, 7)
	if err != nil {
		return Info{}, err
	}
	var nums [5]int64
	for i, j := range []int{0, 1, 2, 3, 6} {
		if nums[i], err = core.Int(strs[j]); err != nil {
			return Info{}, err
		}
	}
	info := Info{Name: name, Limit: nums[1], Used: nums[2], Queued: int(nums[3]), NumHolders: int(nums[4])}
	holders, err := core.ParseExpiring(nums[0], lists[4], 0)
	if err != nil {
		return Info{}, err
	}
	for _, h := range holders {
		info.Holders = append(info.Holders, rlock.Holder(h))
	}
	ws, err := core.ParseWaiters(nums[0], lists[5])
	if err != nil {
		return Info{}, err
	}
	for _, w := range ws {
		info.Waiters = append(info.Waiters, rlock.Waiter(w))
	}
	return info, nil
}
