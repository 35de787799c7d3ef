//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// The shared resource the workers guard with the lock lives in Redis, on a
// server of its own that no fault touches. It is fenced like a storage
// service should be: a read or write carrying a token lower than the highest
// seen, or the same token from another owner, is rejected. Reads are fenced
// too, so a holder that read under an older token cannot write back a value
// computed from it after a newer holder read (Kleppmann's fencing, applied
// to read-modify-write). Every accepted write is appended to a log, the
// checker's ground truth.
//
// Independently of fencing, enter/leave count the workers inside the
// critical section, and log every entry that finds more of them than the
// limit (1 for a Mutex): the unfenced view of mutual exclusion.
//
// An RWMutex's readers read under the token of the last writer, which they
// share with one another (and with that writer). A reader's read is refused
// when its token is below the highest seen; an accepted one takes that token
// away from its writer (a write under it is refused from then on: readers
// are let in only once the writer's hold has ended), and goes to a log of its
// own, numbered with the writes. RWMutex entries are logged when a writer is
// inside with anyone else.

const (
	resState  = "res:state"  // hash: max (highest token), owner (of max), value
	resSeq    = "res:seq"    // accepted write (and RWMutex reader's read) counter
	resLog    = "res:log"    // list: "seq token owner old new"
	resReject = "res:reject" // list: "token owner what max"
	resInside = "res:inside" // set: owners in the critical section
	resExceed = "res:exceed" // list: "owner member member ..." when over the limit
	resOps    = "res:ops"    // operation id counter
	resReads  = "res:reads"  // list: "seq token owner value", RWMutex readers' accepted reads
	resWriter = "res:writer" // set: RWMutex writers in the critical section
)

var (
	fenceCheck = `
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
local mo = redis.call('HGET', KEYS[1], 'owner') or ''
local t = tonumber(ARGV[1])
if t < max or (t == max and mo ~= ARGV[2]) then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. max)
  return {0, max}
end
redis.call('HSET', KEYS[1], 'max', ARGV[1], 'owner', ARGV[2])
`
	// KEYS: state, reject; ARGV: token, owner, "read"
	readScript = rueidis.NewLuaScript(fenceCheck + `
return {1, tonumber(redis.call('HGET', KEYS[1], 'value') or '0')}`)
	// KEYS: state, reject, seq, log; ARGV: token, owner, "write", old, new
	writeScript = rueidis.NewLuaScript(fenceCheck + `
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'value', ARGV[5])
redis.call('RPUSH', KEYS[4], seq .. ' ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5])
return {1, seq}`)
	// KEYS: state, reject, seq, reads; ARGV: token, owner, "read"
	readSharedScript = rueidis.NewLuaScript(`
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
local t = tonumber(ARGV[1])
if t < max then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. max)
  return {0, max}
end
redis.call('HSET', KEYS[1], 'max', ARGV[1], 'owner', '')
local seq = redis.call('INCR', KEYS[3])
local v = tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
redis.call('RPUSH', KEYS[4], seq .. ' ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. v)
return {1, v}`)
	// KEYS: inside, exceed, writers; ARGV: owner, "w" or "r"
	enterRWScript = rueidis.NewLuaScript(`
redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[2] == 'w' then
  redis.call('SADD', KEYS[3], ARGV[1])
end
local n = redis.call('SCARD', KEYS[1])
if n > 1 and redis.call('SCARD', KEYS[3]) > 0 then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. table.concat(redis.call('SMEMBERS', KEYS[1]), ' '))
end
return n`)
	// KEYS: inside, exceed; ARGV: owner, limit
	enterScript = rueidis.NewLuaScript(`
redis.call('SADD', KEYS[1], ARGV[1])
local n = redis.call('SCARD', KEYS[1])
if n > tonumber(ARGV[2]) then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. table.concat(redis.call('SMEMBERS', KEYS[1]), ' '))
end
return n`)
)

type resource struct {
	c rueidis.Client
}

func (r resource) nextOp(ctx context.Context) (int64, error) {
	return r.c.Do(ctx, r.c.B().Incr().Key(resOps).Build()).AsInt64()
}

func (r resource) read(ctx context.Context, token uint64, owner string) (ok bool, value int64, err error) {
	v, err := readScript.Exec(ctx, r.c, []string{resState, resReject},
		[]string{strconv.FormatUint(token, 10), owner, "read"}).AsIntSlice()
	if err != nil {
		return false, 0, err
	}
	return v[0] == 1, v[1], nil
}

func (r resource) write(ctx context.Context, token uint64, owner string, old, new int64) (ok bool, seq int64, err error) {
	v, err := writeScript.Exec(ctx, r.c, []string{resState, resReject, resSeq, resLog},
		[]string{strconv.FormatUint(token, 10), owner, "write", strconv.FormatInt(old, 10), strconv.FormatInt(new, 10)}).AsIntSlice()
	if err != nil {
		return false, 0, err
	}
	return v[0] == 1, v[1], nil
}

func (r resource) enter(ctx context.Context, owner string, limit int64) (int64, error) {
	return enterScript.Exec(ctx, r.c, []string{resInside, resExceed},
		[]string{owner, strconv.FormatInt(limit, 10)}).AsInt64()
}

// readShared is an RWMutex reader's fenced read.
func (r resource) readShared(ctx context.Context, token uint64, owner string) (ok bool, value int64, err error) {
	v, err := readSharedScript.Exec(ctx, r.c, []string{resState, resReject, resSeq, resReads},
		[]string{strconv.FormatUint(token, 10), owner, "read"}).AsIntSlice()
	if err != nil {
		return false, 0, err
	}
	return v[0] == 1, v[1], nil
}

// enterRW enters the critical section of an RWMutex as a writer or a reader.
func (r resource) enterRW(ctx context.Context, owner string, write bool) (int64, error) {
	mode := "r"
	if write {
		mode = "w"
	}
	return enterRWScript.Exec(ctx, r.c, []string{resInside, resExceed, resWriter}, []string{owner, mode}).AsInt64()
}

func (r resource) leave(ctx context.Context, owner string) error {
	for _, resp := range r.c.DoMulti(ctx,
		r.c.B().Srem().Key(resInside).Member(owner).Build(),
		r.c.B().Srem().Key(resWriter).Member(owner).Build()) {
		if err := resp.Error(); err != nil {
			return err
		}
	}
	return nil
}

// sharedRead is one entry of the log of RWMutex readers' accepted reads.
type sharedRead struct {
	seq, token int64
	owner      string
	value      int64
}

func (r resource) reads(ctx context.Context) ([]sharedRead, error) {
	lines, err := r.c.Do(ctx, r.c.B().Lrange().Key(resReads).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	out := make([]sharedRead, 0, len(lines))
	for _, l := range lines {
		var rd sharedRead
		if _, err := fmt.Sscanf(l, "%d %d %s %d", &rd.seq, &rd.token, &rd.owner, &rd.value); err != nil {
			return nil, fmt.Errorf("resource reads line %q: %w", l, err)
		}
		out = append(out, rd)
	}
	return out, nil
}

// acceptedWrite is one entry of the resource's log.
type acceptedWrite struct {
	seq, token int64
	owner      string
	old, new   int64
}

func (r resource) log(ctx context.Context) ([]acceptedWrite, error) {
	lines, err := r.c.Do(ctx, r.c.B().Lrange().Key(resLog).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	out := make([]acceptedWrite, 0, len(lines))
	for _, l := range lines {
		var w acceptedWrite
		if _, err := fmt.Sscanf(l, "%d %d %s %d %d", &w.seq, &w.token, &w.owner, &w.old, &w.new); err != nil {
			return nil, fmt.Errorf("resource log line %q: %w", l, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// exceedances returns, for every entry over the limit, the owners inside.
func (r resource) exceedances(ctx context.Context) ([][]string, error) {
	lines, err := r.c.Do(ctx, r.c.B().Lrange().Key(resExceed).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	out := make([][]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, strings.Fields(l))
	}
	return out, nil
}

func (r resource) rejections(ctx context.Context) (int64, error) {
	return r.c.Do(ctx, r.c.B().Llen().Key(resReject).Build()).AsInt64()
}
