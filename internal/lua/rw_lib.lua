-- rw_lib: helpers shared by the RWMutex scripts; prepended to each of them at
-- build time after mutex_lib.lua (see lua.go), whose now_ms, mutex_tokens,
-- mutex_check_expire, mutex_bury and mutex_grant_channel it uses. It declares
-- functions only and touches no key.
--
-- Every RWMutex script but rw_renew.lua receives the same first seven KEYS,
-- all sharing the lock's {name} hash tag:
--   KEYS[1] writer hash: the writer's owner field -> write hold count, and
--           't' -> its fencing token; expires with the writer's lease
--   KEYS[2] readers zset: owner field -> lease expiry (server time, ms); each
--           reader has its own lease, and expired readers are dropped by the
--           next script that looks (rw_reclaim)
--   KEYS[3] reader counts hash: owner field -> read hold count
--   KEYS[4] queue zset: entry -> arrival number (FIFO order)
--   KEYS[5] waiter deadlines zset: entry -> deadline (server time, ms); a
--           waiter that stops re-checking loses its place when it passes
--   KEYS[6] arrival counter
--   KEYS[7] fencing counter
-- A waiter's entry is mode .. '/' .. lease .. '/' .. owner: mode 'r' or 'w',
-- and the lease (ms) it is granted with when the queue reaches it.
--
-- Writer preference: a new reader enters only when no writer holds the lock
-- and no one is queued; a writer only when no one holds it and no one is
-- queued. Whoever finds the lock taken queues, so a queued writer keeps every
-- reader that comes after it out. When the lock becomes free for the head of
-- the queue (rw_serve, run by every script), a head writer is granted the lock
-- once no reader holds; a head reader is granted it together with every reader
-- queued behind it up to the next writer, and those readers are woken by one
-- message on the read channel (a batch: they confirm with a re-check, which
-- finds their hold). A writer is woken on its own Client's grant channel.
-- Nothing is granted by a message: a waiter only learns from it that it may
-- re-check. A grant that no subscriber hears (the waiters' Clients are gone)
-- is undone at once, and the next waiter served.
--
-- Expiry: the writer hash expires with the writer's lease; the readers zset
-- and counts hash with their last reader's lease; the queue zsets and arrival
-- counter with their last deadline; the fencing counter one lease (1s at
-- least) past its last token, or past the time its value stands for when it
-- runs ahead of the clock (see mutex_tokens). A counter that expired restarts
-- from the server clock in microseconds, above every token it issued before.

-- Bounds the waiters one script serves, so that no script runs long.
local RW_SERVE_MAX = 100

local function rw_dequeue(entry)
  redis.call('ZREM', KEYS[4], entry)
  redis.call('ZREM', KEYS[5], entry)
end

-- Splits an entry into mode, lease and owner; nil for one this version did
-- not write.
local function rw_parse(entry)
  return string.match(entry, '^([rw])/(%d+)/(.+)$')
end

-- A new fencing token (bump) or the counter as it is (readers share the last
-- writer's token; a new one when the counter expired). lease is the lease (ms)
-- of the hold the token is for, which the counter outlives (mutex_tokens).
local function rw_token(bump, lease)
  if not bump then
    local token = tonumber(redis.call('GET', KEYS[7]) or '0')
    if token > 0 then
      return token
    end
  end
  return mutex_tokens(KEYS[7], 1, lease)
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

-- Makes the readers zset and counts hash outlive a reader lease ending at at.
local function rw_keep_readers(now, at)
  for i = 2, 3 do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl ~= -2 and (pttl < 0 or now + pttl < at) then
      redis.call('PEXPIREAT', KEYS[i], at + 1)
    end
  end
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
  local token = rw_token(true, lease)
  redis.call('HSET', KEYS[1], owner, 1, 't', string.format('%d', token))
  redis.call('PEXPIRE', KEYS[1], lease)
  return token
end

-- Forgets waiters whose deadline passed, and returns the head entry (nil when
-- no one waits). Costs one command when no one waits.
local function rw_head(now)
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if not first[1] then
    return nil
  end
  if tonumber(first[2]) <= now then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 1000)
    for _, entry in ipairs(gone) do
      rw_dequeue(entry)
    end
  end
  return redis.call('ZRANGE', KEYS[4], 0, 0)[1]
end

-- Serves the head of the queue while the lock is free for it (see the top of
-- this file). self is the calling owner: a grant to it is not announced.
-- publish is PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua), readch the read channel, grants the grant
-- channel prefix. Call rw_reclaim first.
local function rw_serve(now, self, publish, readch, grants)
  for _ = 1, RW_SERVE_MAX do
    if redis.call('EXISTS', KEYS[1]) == 1 then
      return
    end
    local head = rw_head(now)
    if not head then
      return
    end
    local mode, lease, owner = rw_parse(head)
    if not mode then
      rw_dequeue(head) -- not written by this version
    elseif mode == 'w' then
      if redis.call('ZCARD', KEYS[2]) > 0 then
        return -- readers hold: the last to leave serves the writer
      end
      rw_dequeue(head)
      rw_grant_writer(owner, lease)
      if owner == self then
        return
      end
      if lock_publish(publish, mutex_grant_channel(grants, owner), '@' .. owner) > 0 then
        return
      end
      -- No one heard it: the writer's Client is gone. Undone (the token stays
      -- spent, so tokens still rise); next one.
      redis.call('DEL', KEYS[1])
    else
      -- The readers at the head, up to the next writer, enter together.
      local batch = redis.call('ZRANGE', KEYS[4], 0, RW_SERVE_MAX - 1)
      local others = {}
      for _, entry in ipairs(batch) do
        local m, l, o = rw_parse(entry)
        if m ~= 'r' then
          break
        end
        rw_dequeue(entry)
        rw_grant_reader(now, o, l)
        if o ~= self then
          others[#others + 1] = o
        end
      end
      if #others == 0 or lock_publish(publish, readch, '*') > 0 then
        return
      end
      -- No one heard it: every reader's Client is gone. Undone; next one.
      for _, o in ipairs(others) do
        rw_drop_reader(o)
      end
    end
  end
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
