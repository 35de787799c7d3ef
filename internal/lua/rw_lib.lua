-- rw_lib: helpers shared by the RWMutex scripts; prepended to each of them at
-- build time after mutex_lib.lua (see lua.go), whose now_ms, mutex_tokens,
-- mutex_bury and mutex_grant_channel it uses (and lock_denied, of publish_lib.lua). It declares
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
--   KEYS[5] waiter deadlines zset: entry -> deadline (server time, ms): the
--           time by which the waiter said it re-checks at the latest, plus
--           rw_grace; a waiter that stops re-checking loses its place when
--           it passes
--   KEYS[6] arrival counter
--   KEYS[7] fencing counter
-- A waiter's entry is mode .. '/' .. lease .. '/' .. claim .. '/' .. secret ..
-- '/' .. owner: mode 'r' or 'w', the lease (ms) it asked for, its claim window
-- (ms: a grant made to it while it waits runs for the shorter of the two, see
-- Claims below), and a random hex secret known only to the waiter and to
-- whoever may read the queue key. An arrival number is the server clock in
-- microseconds when the place was taken, or one past the number before when
-- that is later (rw_arrival), so that a place in the queue is never given an
-- arrival number another place had, even after the counter expired.
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
--   '@' .. RW_READ_TAG .. ' ' .. token .. ' ' .. arrival .. ':' .. mac .. ' ' ..
--   arrival .. ':' .. mac ...
-- one arrival:mac pair per reader granted (its place's arrival number), all
-- sharing the token of the last writer. A writer is told on its own Client's
-- grant channel: '@' .. owner .. ' ' .. token .. ':' .. arrival .. ':' .. mac.
-- mac is sha1hex(secret .. ':' .. token .. ':' .. arrival) for the secret of
-- the waiter's entry: anyone may publish on the channels, but only Redis (or a
-- reader of the queue key) can prove a grant. A waiter trusts one only for the
-- place its last check saw (the same arrival number), so a grant read late
-- from an earlier place is not taken for a new one. A grant that no
-- subscriber hears (the waiters' Clients are gone) is undone at once, and the
-- next waiter served.
--
-- Claims: a grant runs for the waiter's claim window, not its whole lease,
-- when that is shorter: the Client that receives it extends it to the lease
-- with its next renewal (batched), and a waiter paused or stuck with its
-- connection open (PUBLISH counts it as a receiver) holds the lock for the
-- claim window only. The two waiters left at the head are then told '@' ..
-- owner .. ' ~' .. ms on their Client's grant channel (a writer) or '@' ..
-- RW_READ_TAG .. ' ~' .. ms on the read channel (readers), so that they
-- re-check when the claim lapses; only those that planned to re-check later
-- than that (see rw_notice).
--
-- Expiry: the writer hash expires with the writer's lease; the readers zset
-- and counts hash with their last reader's lease; the queue zsets and arrival
-- counter with their last deadline; the fencing counter one lease (1s at
-- least) past its last token, or past the time its value stands for when it
-- runs ahead of the clock (see mutex_tokens), and 1s past the last reader's
-- lease (rw_keep_readers, rw_renew.lua), so that readers share one token
-- while any of them holds. A counter that expired restarts
-- from the server clock in microseconds, above every token it issued before.

-- Bounds the waiters one script serves, so that no script runs long.
local RW_SERVE_MAX = 100
-- How many waiters at the head, left behind claimed grants, are told when the
-- claims lapse (see rw_notice).
local RW_CHASE = 2
-- The tag of every reader waiter of a lock on its read channel (see
-- pubsubx.SetTag): no owner field is spelt so.
local RW_READ_TAG = 'r'

-- Whether, by c, this user may run what the RWMutex scripts may run on
-- KEYS[1..7]: with the script's own further keys, its check before its first
-- write (see lock_denied).
local function rw_may(c)
  local w, r, n, q, d, a, f = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
  return c('TIME') and
    c('PTTL', w) and c('EXISTS', w) and c('HGET', w, 'f') and c('HMGET', w, 'f') and
    c('HEXISTS', w, 'f') and c('HSET', w, 'f', '1') and c('HINCRBY', w, 'f', '1') and
    c('PEXPIRE', w, '1') and c('DEL', w) and
    c('ZRANGE', r, '0', '0') and c('ZRANGEBYSCORE', r, '0', '0') and c('ZADD', r, '1', 'm') and
    c('ZREM', r, 'm') and c('ZCARD', r) and c('PTTL', r) and c('PEXPIREAT', r, '1') and
    c('HGET', n, 'f') and c('HEXISTS', n, 'f') and c('HSET', n, 'f', '1') and
    c('HINCRBY', n, 'f', '1') and c('HDEL', n, 'f') and c('PTTL', n) and c('PEXPIREAT', n, '1') and
    c('ZRANGE', q, '0', '0') and c('ZSCORE', q, 'm') and c('ZADD', q, '1', 'm') and
    c('ZREM', q, 'm') and c('ZCARD', q) and c('PEXPIREAT', q, '1') and
    c('ZRANGE', d, '0', '0') and c('ZRANGEBYSCORE', d, '0', '0') and c('ZSCORE', d, 'm') and
    c('ZADD', d, '1', 'm') and c('ZREM', d, 'm') and c('PEXPIREAT', d, '1') and
    c('INCR', a) and c('SET', a, '1', 'PX', '1') and c('PEXPIREAT', a, '1') and
    c('GET', f) and c('INCRBY', f, '1') and c('SET', f, '1', 'PX', '1') and c('PTTL', f) and
    c('PEXPIREAT', f, '1')
end

-- The refusal of a grant that could not be announced on channel (see
-- rw_serve).
local function rw_unannounced(publish, channel)
  return lock_refusal(lock_publish_name(publish), channel,
    'the lock was not handed to the waiters queued first, who could not be told of it')
end

local function rw_dequeue(entry)
  redis.call('ZREM', KEYS[4], entry)
  redis.call('ZREM', KEYS[5], entry)
end

local function rw_entry(mode, lease, claim, secret, owner)
  return mode .. '/' .. lease .. '/' .. claim .. '/' .. secret .. '/' .. owner
end

-- Splits an entry into mode, lease, claim window, secret and owner; nil for
-- one this version did not write.
local function rw_parse(entry)
  local mode, lease, claim, secret, owner = string.match(entry, '^([rw])/(%d+)/(%d+)/(%x+)/(.+)$')
  if not mode or tonumber(lease) <= 0 or tonumber(claim) <= 0 then
    return nil
  end
  return mode, tonumber(lease), tonumber(claim), secret, owner
end

-- How long past its planned re-check a waiter keeps its place (ms): its lease,
-- 2s at least, as for the Mutex (see mutex_grace). The waiter deadlines zset
-- holds both at once; rw_notice reads the planned re-check back.
local function rw_grace(lease)
  return math.max(tonumber(lease), 2000)
end

-- A new arrival number: the server clock in microseconds, or one past the
-- number before when that is later. A missing counter so starts from the
-- clock, above every number it issued before as long as the clock rises and
-- fewer than a million places a second are taken: no two places ever share
-- one (see the top of this file); and an inspection reads the time a place
-- was taken from its number (see rw_inspect.lua).
local function rw_arrival()
  return mutex_arrival(KEYS[6])
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

-- Makes the readers zset and counts hash outlive a reader lease ending at at,
-- and the fencing counter outlive it by MUTEX_FENCE_KEEP_MS: readers share
-- the last writer's token (rw_token) for as long as any reader holds, however
-- long after that token. Only ever later: the counter's expiry stays past the
-- time its value stands for (see mutex_tokens). A counter with no expiry was
-- not set by this library and is left so.
local function rw_keep_readers(now, at)
  for i = 2, 3 do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl ~= -2 and (pttl < 0 or now + pttl < at) then
      redis.call('PEXPIREAT', KEYS[i], at + 1)
    end
  end
  local pttl = redis.call('PTTL', KEYS[7])
  if pttl >= 0 and now + pttl < at + MUTEX_FENCE_KEEP_MS then
    redis.call('PEXPIREAT', KEYS[7], at + MUTEX_FENCE_KEEP_MS)
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

-- Tells the RW_CHASE waiters now at the head that the grants just made run
-- for claimed ms only (their claim windows, see the top of this file), so
-- that they re-check when they lapse rather than when they planned to; only
-- those that planned to re-check later than that, read back from their
-- deadlines (see rw_grace), which are brought forward to match. The second
-- one is told too so that two hung waiters in a row cost two claim windows
-- (see mutex_handoff). Readers hear one notice on the read channel. self (the
-- caller) is not told: it learns what holds from its own reply.
local function rw_notice(now, self, claimed, publish, readch, grants)
  local readers_told = false
  for _, entry in ipairs(redis.call('ZRANGE', KEYS[4], 0, RW_CHASE - 1)) do
    local mode, lease, _, _, owner = rw_parse(entry)
    local by = mode and now + claimed + rw_grace(lease)
    local channel = readch
    if mode == 'w' then
      channel = mutex_grant_channel(grants, owner)
    end
    if mode and owner ~= self and tonumber(redis.call('ZSCORE', KEYS[5], entry) or by) > by and
        lock_may_publish(publish, channel) then
      if mode == 'w' then
        lock_publish(publish, mutex_grant_channel(grants, owner), string.format('@%s ~%d', owner, claimed))
      elseif not readers_told then
        lock_publish(publish, readch, string.format('@%s ~%d', RW_READ_TAG, claimed))
        readers_told = true
      end
      redis.call('ZADD', KEYS[5], 'XX', by, entry)
    end
  end
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
    local head = rw_head(now)
    if not head then
      break
    end
    local mode, lease, claim, secret, owner = rw_parse(head)
    if not mode then
      rw_dequeue(head) -- not written by this version
    elseif mode == 'w' then
      if redis.call('ZCARD', KEYS[2]) > 0 then
        break -- readers hold: the last to leave serves the writer
      end
      if owner ~= self and not lock_may_publish(publish, mutex_grant_channel(grants, owner)) then
        refused = rw_unannounced(publish, mutex_grant_channel(grants, owner))
        break
      end
      local arrival = tonumber(redis.call('ZSCORE', KEYS[4], head))
      rw_dequeue(head)
      local ttl = math.min(lease, claim)
      local token = rw_grant_writer(owner, ttl)
      if owner == self then
        break
      end
      -- %d: a number concatenated as is may print as 1.7e+15.
      local grant = string.format('%d:%d', token, arrival)
      if lock_publish(publish, mutex_grant_channel(grants, owner), '@' .. owner .. ' ' .. grant .. ':' .. redis.sha1hex(secret .. ':' .. grant)) > 0 then
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
      if not lock_may_publish(publish, readch) and (owner ~= self or rw_parse(batch[3] or '') == 'r') then
        refused = rw_unannounced(publish, readch)
        break
      end
      local others, proofs, shortest, token = {}, {}, nil, nil
      for i = 1, #batch, 2 do
        local m, l, c, secret, o = rw_parse(batch[i])
        if m ~= 'r' then
          break
        end
        rw_dequeue(batch[i])
        local ttl = math.min(l, c)
        rw_grant_reader(now, o, ttl)
        if o ~= self then
          token = token or string.format('%d', rw_token(false, l))
          local arrival = string.format('%d', tonumber(batch[i + 1]))
          others[#others + 1] = o
          proofs[#proofs + 1] = arrival .. ':' .. redis.sha1hex(secret .. ':' .. token .. ':' .. arrival)
          if ttl < l then
            shortest = math.min(shortest or ttl, ttl)
          end
        end
      end
      if #others == 0 then
        break
      end
      if lock_publish(publish, readch, '@' .. RW_READ_TAG .. ' ' .. token .. ' ' .. table.concat(proofs, ' ')) > 0 then
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
    rw_notice(now, self, claimed, publish, readch, grants)
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
