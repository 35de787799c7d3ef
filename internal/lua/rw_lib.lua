-- rw_lib: helpers shared by the RWMutex scripts; prepended to each of them at
-- build time after publish_lib.lua, queue_lib.lua and fence_lib.lua (see
-- lua.go). It declares functions only and touches no key.
--
-- Every RWMutex script but rw_renew.lua receives the same first seven KEYS,
-- all sharing the lock's {name} hash tag:
--   KEYS[1] writer hash: the writer's owner field -> write hold count, and
--           LOCK_TOKEN -> its fencing token, LOCK_CLAIM -> the end of a
--           claim (see publish_lib.lua); expires with the writer's lease
--   KEYS[2] readers zset: owner field -> lease expiry (server time, ms); each
--           reader has its own lease, and expired readers are dropped by the
--           next script that looks (rw_reclaim); a reader granted for a claim
--           window is scored so that it tells (see lease_score)
--   KEYS[3] reader counts hash: owner field -> read hold count
--   KEYS[4] queue zset, KEYS[5] waiter deadlines zset, KEYS[6] arrival
--           counter: the wait queue (see queue_lib.lua); a waiter's entry
--           asks for 'r' or 'w'
--   KEYS[7] fencing counter (see fence_lib.lua)
--
-- Writer preference: a new reader enters only when no writer holds the lock
-- and no one is queued; a writer only when no one holds it and no one is
-- queued. Whoever finds the lock taken queues, so a queued writer keeps every
-- reader that comes after it out. When the lock becomes free for the head of
-- the queue (rw_serve, run by every script), a head writer is granted the lock
-- once no reader holds; a head reader is granted it together with every reader
-- queued behind it up to the next writer, and those readers are told so by
-- one message on the read channel, addressed to the tag every reader waiter
-- of the lock takes (RW_READ_TAG):
--   '@' .. RW_READ_TAG .. ' ' .. proof .. ' ' .. proof ...
-- one proof per reader granted (see queue_lib.lua:
-- its arrival number and the token of the last writer, which they share). A
-- writer is told on its own Client's grant channel: '@' .. owner .. ' ' ..
-- proof, of its place's arrival number and its token. A waiter trusts a grant
-- only for the place its last check saw (the same arrival number), so a grant
-- read late from an earlier place is not taken for a new one. Claims (see
-- queue_lib.lua): the readers left at the head are told on the read channel
-- '@' .. RW_READ_TAG .. ' ~' .. ms, once.
--
-- Expiry: the writer hash expires with the writer's lease; the readers zset
-- and counts hash with their last reader's lease; the queue zsets and arrival
-- counter with their last deadline; the fencing counter as fence_lib.lua
-- says, and FENCE_KEEP_MS past the last reader's lease (fence_keep), so
-- that readers share one token while any of them holds.

-- The tag of every reader waiter of a lock on its read channel (see
-- mux.Waiter.SetTag), which is also what a reader asks for: no owner field
-- is spelt so.
local RW_READ_TAG = 'r'

-- The RWMutex's queue (see queue_lib.lua), set at the start of each call.
local rwq
script_begins[#script_begins + 1] = function()
  rwq = {queue = KEYS[4], waiters = KEYS[5], seq = KEYS[6]}
end

-- Whether, by c, this user may run what the RWMutex scripts may run on
-- KEYS[1..7]: with the script's own further keys, its check before its first
-- write (see lock_denied).
local function rw_may(c)
  local w, r, n = KEYS[1], KEYS[2], KEYS[3]
  return c('PTTL', w) and c('EXISTS', w) and c('HGET', w) and c('HMGET', w) and
    c('HEXISTS', w) and c('HSET', w) and c('HINCRBY', w) and
    c('PEXPIRE', w) and c('PEXPIREAT', w) and c('DEL', w) and
    c('ZRANGE', r) and c('ZRANGEBYSCORE', r) and c('ZADD', r) and
    c('ZREM', r) and c('ZCARD', r) and c('PTTL', r) and c('PEXPIREAT', r) and
    c('HGET', n) and c('HEXISTS', n) and c('HSET', n) and
    c('HINCRBY', n) and c('HDEL', n) and c('PTTL', n) and c('PEXPIREAT', n) and
    queue_may(c, rwq) and fence_may(c, KEYS[7]) and c('PTTL', KEYS[7])
end

-- What an uncontended read take runs from its first write on (see
-- rw_may): the counter's first write when it is made (rw_token), the read
-- hold (rw_grant_reader) and the expiries kept past it (fence_keep).
local function rw_read_may(c)
  local r, n, fence = KEYS[2], KEYS[3], KEYS[7]
  return c('SET', fence, '1', 'PXAT', '1', 'GET') and c('ZADD', r) and c('ZREM', r) and c('HSET', n) and
    c('PTTL', r) and c('PEXPIREAT', r) and c('PTTL', n) and c('PEXPIREAT', n) and
    c('PTTL', fence) and c('PEXPIREAT', fence)
end

-- What an uncontended write take runs from its first write on: a token
-- (fence_tokens) and the hold (rw_grant_writer).
local function rw_write_may(c)
  return c('SET', KEYS[7], '1', 'PXAT', '1', 'GET') and c('HSET', KEYS[1]) and c('PEXPIRE', KEYS[1])
end

-- What a release of mode ('r' or 'w') runs from its first write on when no
-- reader's lease ran out (rw_reclaim drops none) and no one is queued (no
-- one to serve): its level or its hold, and the expiries kept past a
-- reader's.
local function rw_release_may(c, mode)
  local w, r, n, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[7]
  if mode == 'w' then
    return c('HSET', w) and c('PEXPIRE', w) and c('DEL', w) and c('SET', fence, '1', 'NX', 'PXAT', '1')
  end
  return c('HSET', n) and c('ZADD', r) and c('ZREM', r) and c('HDEL', n) and
    c('PTTL', r) and c('PEXPIREAT', r) and c('PTTL', n) and c('PEXPIREAT', n) and
    c('PTTL', fence) and c('PEXPIREAT', fence)
end

-- Drops the readers whose lease ran out. Returns what it read of the
-- readers zset, its first entry with its score ({} when none), when it
-- dropped none (nil when it did): a caller that changes no reader may pass
-- it to rw_wait instead of a second read. first: that entry, if the caller
-- just read it.
local function rw_reclaim(now, first)
  first = first or redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[1] or tonumber(first[2]) > now then
    return first
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, owner in ipairs(gone) do
    redis.call('ZREM', KEYS[2], owner)
    redis.call('HDEL', KEYS[3], owner)
  end
end

-- Gives owner a read hold (count 1) with a lease of lease ms from now;
-- claimed for a grant of a claim window (see lease_score). Returns the end of
-- that lease; batch: the caller grants several readers and keeps the keys
-- past the latest lease once (fence_keep), after the last.
local function rw_grant_reader(now, owner, lease, claimed, batch)
  local at = now + tonumber(lease)
  queue_hold_lease(KEYS[2], KEYS[3], owner, lease_score(at, claimed), 1)
  if not batch then
    fence_keep(KEYS[7], now, at, KEYS[2], KEYS[3])
  end
  return at
end

-- Sets the lease of owner's read hold afresh (it must hold): no claim any
-- more.
local function rw_renew_reader(now, owner, lease)
  local at = now + tonumber(lease)
  redis.call('ZADD', KEYS[2], 'XX', at, owner)
  fence_keep(KEYS[7], now, at, KEYS[2], KEYS[3])
end

local function rw_drop_reader(owner)
  redis.call('ZREM', KEYS[2], owner)
  redis.call('HDEL', KEYS[3], owner)
end

-- The token readers take (see the top of this file): the fencing counter's.
-- When it lapsed under a writer that held on past its keep (renewals keep
-- the writer hash, not the counter), the writer's own token, which the
-- counter is set back to: readers share the last writer's token, and the
-- next writer's is still higher. keep: as for fence_now.
local function rw_token(keep)
  local cur = lock_call('GET', KEYS[7])
  if cur then
    return tonumber(cur)
  end
  local token = tonumber(lock_call('HGET', KEYS[1], LOCK_TOKEN))
  if not token then
    return fence_tokens(KEYS[7], 1, keep)
  end
  now_ms()
  redis.call('SET', KEYS[7], string.format('%d', token), 'PXAT', fence_expiry(token, keep, clock_ms))
  return token
end

-- Keeps the fencing counter at least at token, the token of a writer whose
-- last level is released at now (ms) after holding for longer than the
-- counter is sure to be kept (FENCE_KEEP_MS): it may have lapsed meanwhile,
-- and readers that come next share that writer's token (see rw_token).
local function rw_keep_writer_token(token, now, keep)
  if token and now - math.floor(token / 1000) >= FENCE_KEEP_MS then
    redis.call('SET', KEYS[7], string.format('%d', token), 'NX', 'PXAT', string.format('%d', now + math.max(tonumber(keep), FENCE_KEEP_MS)))
  end
end

-- Gives owner the write lock (count 1) with a new fencing token for ttl ms
-- of its lease (ms; longer: a claim, see lock_hold); returns the token.
local function rw_grant_writer(owner, ttl, lease)
  local token = fence_tokens(KEYS[7], 1, ttl)
  lock_hold(KEYS[1], owner, token, ttl, lease)
  return token
end

-- Whether the lock is free for anyone (no writer holds), or for the head
-- waiter owner, asking mode (see queue_serve): a writer once no reader holds,
-- a reader with every reader queued behind it up to the next writer (k.batch:
-- the queue from the head, with scores); nil for an entry this version did
-- not write. A grant to the caller (k.self) alone is not announced.
local function rw_fits(k, owner, mode)
  if not owner then
    -- (k.freed: the caller just deleted the writer hash, and nothing was
    -- granted since. PTTL, not EXISTS: rw_wait reads it too.)
    k.pttl = k.freed and -2 or redis.call('PTTL', KEYS[1])
    k.free, k.freed = k.pttl == -2, nil
    return k.free
  elseif mode == 'w' then
    if redis.call('ZCARD', KEYS[2]) > 0 then
      k.blocked = true
      return false -- readers hold: the last to leave serves the writer
    end
    return owner ~= k.self or 'quiet'
  elseif mode == 'r' then
    k.batch = redis.call('ZRANGE', KEYS[4], 0, QUEUE_SERVE_MAX - 1, 'WITHSCORES')
    return owner ~= k.self or select(5, queue_parse(k.batch[3] or '')) == 'r' or 'quiet'
  end
  return nil
end

-- Grants the writer at the head, or the readers of k.batch up to the next
-- writer (the head among them, already dequeued); a grant to the caller is
-- not announced. The readers' proofs name the token of the last writer,
-- which they share; k.others are the readers announced.
local function rw_grant(k, _, arrival, owner, lease, ttl, secret, mode)
  k.others, k.granted = nil, true
  if mode == 'w' then
    local token = rw_grant_writer(owner, ttl, lease)
    return owner ~= k.self and queue_proof(secret, arrival, token) or nil
  end
  local batch, others, proofs, shortest, token = k.batch, {}, {}, nil, nil
  local latest = 0
  local i = 1
  while i <= #batch do
    local o, l, t, s, m = queue_parse(batch[i])
    if m ~= 'r' then
      break
    elseif i > 1 then
      queue_dequeue(rwq, batch[i])
    end
    latest = math.max(latest, rw_grant_reader(k.now, o, t, t < l, true))
    if o ~= k.self then
      token = token or rw_token(l)
      others[#others + 1] = o
      proofs[#proofs + 1] = queue_proof(s, tonumber(batch[i + 1]), token)
      if t < l then
        shortest = math.min(shortest or t, t)
      end
    end
    i = i + 2
  end
  if latest > 0 then
    fence_keep(KEYS[7], k.now, latest, KEYS[2], KEYS[3])
  end
  k.others = others
  -- The entries now at the head: past the batch when it took them all.
  local rest = i > #batch and #batch == 2 * QUEUE_SERVE_MAX and redis.call('ZRANGE', KEYS[4], 0, QUEUE_CHASE - 1) or {}
  for j = i, math.min(#batch, i + 2 * QUEUE_CHASE - 2), 2 do
    rest[#rest + 1] = batch[j]
  end
  return #others > 0 and table.concat(proofs, ' ') or nil, rest, shortest
end

-- A grant heard stops the serving (the lock is taken); one no one heard (the
-- Clients are gone) is undone, the token staying spent so that tokens still
-- rise, and the next waiter served.
local function rw_settle(k, heard)
  if heard then
    return false
  elseif k.others then
    for _, o in ipairs(k.others) do
      rw_drop_reader(o)
    end
  else
    redis.call('DEL', KEYS[1])
  end
  return true
end

-- Serves the head of the queue while the lock is free for it (see the top of
-- this file and queue_serve). self is the calling owner: a grant to it is not
-- announced, and runs for its whole lease once the caller finds it. publish
-- is PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua), readch the read
-- channel, grants the grant channel prefix; freed: the caller just deleted
-- the writer hash (it need not be looked up). Call rw_reclaim first.
-- Returns the refusal queue_serve returns, if any, and what the serving saw
-- when it granted nothing (else nil): whether the lock was free for a new
-- holder then (no writer holds, no one is queued), as the caller would find
-- it by reading again.
local function rw_serve(now, self, publish, readch, grants, freed)
  local k = {self = self, grants = grants, tag = RW_READ_TAG, channel = readch, now = now,
    fits = rw_fits, grant = rw_grant, settle = rw_settle, freed = freed}
  local served, refusal = queue_serve(rwq, nil, publish, k)
  if k.granted or served == false and k.free and not k.blocked then
    -- (The second: the lock free, no head that waits, yet served is not
    -- nil: the loop ran out of its QUEUE_SERVE_MAX passes dropping
    -- entries, and did not see the queue to its end.)
    return refusal, nil
  end
  -- (served is nil when the loop found no head: the queue is empty.)
  return refusal, {free = k.free and served == nil, pttl = k.pttl}
end

-- How long a waiter may sleep before something may change without a message:
-- the writer's remaining lease or the earliest reader's (ms), -1 when the
-- writer hash has no expiry (not set by this library), 0 when nothing holds.
-- readers: the readers zset's first entry with its score, and pttl the
-- writer hash's PTTL, if the caller knows them (see rw_reclaim, rw_serve).
local function rw_wait(now, readers, pttl)
  local wait = nil
  pttl = pttl or redis.call('PTTL', KEYS[1])
  if pttl == -1 then
    return -1
  elseif pttl >= 0 then
    wait = pttl
  end
  local first = readers or redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[1] then
    local left = math.max(lease_end(first[2]) - now, 0)
    if not wait or left < wait then
      wait = left
    end
  end
  return wait or 0
end
