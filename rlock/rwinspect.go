package rlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/internal/lua"
)

// RWLockInfo is an RWMutex as Inspect found it, read in one script (so
// consistent with itself, though it may have changed since).
type RWLockInfo struct {
	Name string
	// Writer is the write holder, nil when none; its Token is exact, and
	// its Claim recorded (see Holder).
	Writer *Holder
	// Readers are the read holders (at most 1000 of them, NumReaders counts
	// them all), each with its own lease, its Claim, and the token readers
	// share.
	Readers    []Holder
	NumReaders int
	// Fence is the fencing counter: the last token issued (0 when it
	// expired).
	Fence uint64
	// Queued counts the waiters; Waiters lists them from the head (at most
	// 1000), each with its Mode.
	Queued  int
	Waiters []Waiter
}

// Inspect reads the RWMutex's holders and queue in one round trip, changing
// nothing. On failure (an invalid name, a closed Client, Redis unreachable
// or an unexpected reply) the RWLockInfo is zero and the error says which.
func (rw *RWMutex) Inspect(ctx context.Context) (RWLockInfo, error) {
	if ctx == nil {
		return RWLockInfo{}, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := rw.usable(); err != nil {
		return RWLockInfo{}, err
	}
	k := rw.keys
	var info RWLockInfo
	err := rw.c.Inspect(ctx, func(ctx context.Context) (err error) {
		res := lua.RWInspect.Exec(ctx, rw.c.RC, []string{k.writer, k.readers, k.counts, k.queue, k.waiters, k.fence},
			[]string{strconv.Itoa(core.InspectMax)})
		info, err = parseRWLockInfo(rw.name, res)
		return err
	})
	if err != nil {
		return RWLockInfo{}, rw.wrap("inspect", err)
	}
	return info, nil
}

func parseRWLockInfo(name string, res rueidis.RedisResult) (RWLockInfo, error) {
	strs, lists, err := core.InspectReply(res, 9)
	if err != nil {
		return RWLockInfo{}, err
	}
	nums, err := ints([]string{strs[0], strs[1], strs[2], strs[3], strs[7]})
	if err != nil {
		return RWLockInfo{}, err
	}
	info := RWLockInfo{Name: name, Fence: uint64(max(nums[2], 0)), Queued: int(nums[3]), NumReaders: int(nums[4])}
	if info.Writer, err = rwWriter(lists[4], nums[1]); err != nil {
		return RWLockInfo{}, err
	}
	if info.Writer != nil {
		info.Writer.Claim = strs[8] == "1"
	}
	readers, err := core.ParseExpiring(nums[0], lists[5], info.Fence)
	if err != nil {
		return RWLockInfo{}, err
	}
	for _, r := range readers {
		info.Readers = append(info.Readers, Holder(r))
	}
	info.Waiters, err = waiters(nums[0], lists[6])
	return info, err
}

// rwWriter reads the writer hash's owner and token fields (see
// rw_inspect.lua): the owner's count and 't', its token.
func rwWriter(fields []string, pttl int64) (*Holder, error) {
	var h *Holder
	var token int64
	for i := 0; i+1 < len(fields); i += 2 {
		n, err := core.Int(fields[i+1])
		if err != nil {
			return nil, err
		}
		if fields[i] == "t" {
			token = n
			continue
		}
		h = &Holder{Owner: fields[i], ClientID: core.ClientOf(fields[i]), Count: n, LeaseLeft: core.LeaseOf(pttl)}
	}
	if h != nil {
		h.Token = uint64(max(token, 0))
	}
	return h, nil
}
