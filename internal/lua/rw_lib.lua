-- rw_lib: helpers shared by the RWMutex scripts; prepended to each of them at
-- build time after publish_lib.lua, queue_lib.lua and fence_lib.lua (see
-- lua.go). It declares functions only and touches no key.
--
-- Every RWMutex script but rw_renew.lua receives the same first seven KEYS,
-- all sharing the lock's {name} hash tag:
--   KEYS[1] writer hash: the writer's owner field -> write hold count, and
--           't' -> its fencing token; expires with the writer's lease
--   KEYS[2] readers zset: owner field -> lease expiry (server time, ms); each
--           reader has its own lease, and expired readers are dropped by the
--           next script that looks (rw_reclaim)
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
-- says, and FENCE_KEEP_MS past the last reader's lease (rw_keep_readers,
-- rw_renew.lua), so that readers share one token while any of them holds.

-- Bounds the waiters one script serves, so that no script runs long.
local RW_SERVE_MAX = 100
-- The tag of every reader waiter of a lock on its read channel (see
-- mux.Waiter.SetTag): no owner field is spelt so.
local RW_READ_TAG = 'r'

local rwq = {queue = KEYS[4], waiters = KEYS[5], seq = KEYS[6]}

-- Whether, by c, this user may run what the RWMutex scripts may run on
-- KEYS[1..7]: with the script's own further keys, its check before its first
-- write (see lock_denied).
local function rw_may(c)
  local w, r, n = KEYS[1], KEYS[2], KEYS[3]
  return c('PTTL', w) and c('EXISTS', w) and c('HGET', w, 'f') and c('HMGET', w, 'f') and
    c('HEXISTS', w, 'f') and c('HSET', w, 'f', '1') and c('HINCRBY', w, 'f', '1') and
    c('PEXPIRE', w, '1') and c('DEL', w) and
    c('ZRANGE', r, '0', '0') and c('ZRANGEBYSCORE', r, '0', '0') and c('ZADD', r, '1', 'm') and
    c('ZREM', r, 'm') and c('ZCARD', r) and c('PTTL', r) and c('PEXPIREAT', r, '1') and
    c('HGET', n, 'f') and c('HEXISTS', n, 'f') and c('HSET', n, 'f', '1') and
    c('HINCRBY', n, 'f', '1') and c('HDEL', n, 'f') and c('PTTL', n) and c('PEXPIREAT', n, '1') and
    queue_may(c, rwq) and fence_may(c, KEYS[7]) and c('PTTL', KEYS[7])
end

-- Drops the readers whose lease ran out.
local function rw_reclaim(now)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[1] or tonumber(first[2]) > now then
    return
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, owner in ipairs(gone) do
    redis.call('ZREM', KEYS[2], owner)
    redis.call('HDEL', KEYS[3], owner)
  end
end

-- Makes the readers zset and counts hash outlive a reader lease ending at at,
-- and the fencing counter too (fence_keep): readers share the last writer's
-- token for as long as any reader holds, however long after that token.
local function rw_keep_readers(now, at)
  for i = 2, 3 do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl ~= -2 and (pttl < 0 or now + pttl < at) then
      redis.call('PEXPIREAT', KEYS[i], at + 1)
    end
  end
  fence_keep(KEYS[7], now, at)
end

-- Gives owner a read hold (count 1) with a lease of lease ms from now.
local function rw_grant_reader(now, owner, lease)
  local at = now + tonumber(lease)
  redis.call('ZADD', KEYS[2], at, owner)
  redis.call('HSET', KEYS[3], owner, 1)
  rw_keep_readers(now, at)
end

-- Sets the lease of owner's read hold afresh (it must hold).
local function rw_renew_reader(now, owner, lease)
  local at = now + tonumber(lease)
  redis.call('ZADD', KEYS[2], 'XX', at, owner)
  rw_keep_readers(now, at)
end

local function rw_drop_reader(owner)
  redis.call('ZREM', KEYS[2], owner)
  redis.call('HDEL', KEYS[3], owner)
end

-- Gives owner the write lock (count 1) with a new fencing token; returns it.
local function rw_grant_writer(owner, lease)
  local token = fence_tokens(KEYS[7], 1, lease)
  redis.call('HSET', KEYS[1], owner, 1, 't', string.format('%d', token))
  redis.call('PEXPIRE', KEYS[1], lease)
  return token
end

-- Grants the readers at the head (batch: the queue from the head, with
-- scores), up to the next writer; self's grant is not announced. Returns
-- the others granted, their proofs, the shortest claim among them (nil when
-- none is shorter than its lease) and the token they share.
local function rw_grant_readers(now, self, batch)
  local others, proofs, shortest, token = {}, {}, nil, nil
  for i = 1, #batch, 2 do
    local o, lease, ttl, secret, mode = queue_parse(batch[i])
    if mode ~= 'r' then
      break
    end
    queue_dequeue(rwq, batch[i])
    rw_grant_reader(now, o, ttl)
    if o ~= self then
      token = token or fence_now(KEYS[7], lease)
      others[#others + 1] = o
      proofs[#proofs + 1] = queue_proof(secret, tonumber(batch[i + 1]), token)
      if ttl < lease then
        shortest = math.min(shortest or ttl, ttl)
      end
    end
  end
  return others, proofs, shortest
end

-- Serves the head of the queue while the lock is free for it (see the top of
-- this file). self is the calling owner: a grant to it is not announced, and
-- runs for its whole lease once the caller finds it. publish is PUBLISH,
-- SPUBLISH or PUBLISH? (see publish_lib.lua), readch the read channel, grants
-- the grant channel prefix. Call rw_reclaim first. Returns, when the head
-- could not be told of its grant (an ACL refuses the channel), the refusal:
-- the grant is not made, and the head stays queued and takes the lock when it
-- re-checks. Other notices that may not be published are left out.
local function rw_serve(now, self, publish, readch, grants)
  local claimed -- the shortest claim window granted to others, if any
  local refused
  for _ = 1, RW_SERVE_MAX do
    if redis.call('EXISTS', KEYS[1]) == 1 then
      break
    end
    local head, arrival = queue_head(rwq)
    if not head then
      break
    end
    local owner, lease, ttl, secret, mode = queue_parse(head)
    if mode ~= 'w' and mode ~= 'r' then
      queue_dequeue(rwq, head) -- not written by this version
    elseif mode == 'w' then
      if redis.call('ZCARD', KEYS[2]) > 0 then
        break -- readers hold: the last to leave serves the writer
      end
      local to = queue_channel(grants, owner)
      if owner ~= self and not lock_may_publish(publish, to) then
        refused = queue_unannounced(publish, to)
        break
      end
      queue_dequeue(rwq, head)
      local token = rw_grant_writer(owner, ttl)
      if owner == self then
        break
      end
      if lock_publish(publish, to, '@' .. owner .. ' ' .. queue_proof(secret, arrival, token)) > 0 then
        if ttl < lease then
          claimed = ttl
        end
        break
      end
      -- No one heard it: the writer's Client is gone. Undone (the token stays
      -- spent, so tokens still rise); next one.
      redis.call('DEL', KEYS[1])
    else
      -- The readers at the head, up to the next writer, enter together.
      local batch = redis.call('ZRANGE', KEYS[4], 0, RW_SERVE_MAX - 1, 'WITHSCORES')
      if not lock_may_publish(publish, readch) and (owner ~= self or select(5, queue_parse(batch[3] or '')) == 'r') then
        refused = queue_unannounced(publish, readch)
        break
      end
      local others, proofs, shortest = rw_grant_readers(now, self, batch)
      if #others == 0 then
        break
      end
      if lock_publish(publish, readch, '@' .. RW_READ_TAG .. ' ' .. table.concat(proofs, ' ')) > 0 then
        claimed = shortest
        break
      end
      -- No one heard it: every reader's Client is gone. Undone; next one.
      for _, o in ipairs(others) do
        rw_drop_reader(o)
      end
    end
  end
  if claimed then
    queue_chase(rwq, now, claimed, redis.call('ZRANGE', KEYS[4], 0, QUEUE_CHASE - 1), self, publish, function(owner, mode)
      if mode == 'w' then
        return queue_channel(grants, owner), owner
      end
      return readch, RW_READ_TAG
    end)
  end
  return refused
end

-- How long a waiter may sleep before something may change without a message:
-- the writer's remaining lease or the earliest reader's (ms), -1 when the
-- writer hash has no expiry (not set by this library), 0 when nothing holds.
local function rw_wait(now)
  local wait = nil
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -1 then
    return -1
  elseif pttl >= 0 then
    wait = pttl
  end
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[1] then
    local left = math.max(tonumber(first[2]) - now, 0)
    if not wait or left < wait then
      wait = left
    end
  end
  return wait or 0
end
