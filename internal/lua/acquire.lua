-- acquire: take or re-enter a reentrant lock held as a hash of owner -> hold
-- count, with the holder's token and claim (see LOCK_TOKEN in
-- publish_lib.lua). Contended acquisitions queue in arrival order, and a lock
-- that becomes free goes to the waiter at the head of the queue, and to no
-- one else: it is handed to it directly (see mutex_lib.lua and
-- queue_lib.lua).
--
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter (see fence_lib.lua)
-- KEYS[3]  tombstone of this owner field, written by abandon.lua
-- KEYS[4]  queue zset (see queue_lib.lua)
-- KEYS[5]  waiter deadlines zset
-- KEYS[6]  arrival counter
-- KEYS[7]  re-entry only: result latch of this request (same hash tag)
-- ARGV[1]  owner field (client id ":" hold id)
-- ARGV[2]  lease in milliseconds, set on the hash on success (and the lease a
--          queued waiter is handed the lock with)
-- ARGV[3]  "1" to re-enter an existing hold, "0" for a first acquisition
-- ARGV[4]  "1" to join (or stay in) the queue when not acquired, "0" not to
-- ARGV[5]  the longest a queued waiter waits before re-checking (ms; it
--          re-checks sooner when the holder's lease ends sooner): its place
--          lapses its lease later (see queue_grace)
-- ARGV[6]  publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[7]  unlock channel
-- ARGV[8]  fencing tokens to reserve when this call takes the lock (1, or a
--          block the holder may pass on to goroutines of its own process)
-- ARGV[9]  fencing tokens to reserve for a queued waiter handed the lock
-- ARGV[10] this waiter's secret (hex), part of its queue entry: a hand-off
--          message proves itself with it (see queue_lib.lua)
-- ARGV[11] re-entry only: latch lifetime in milliseconds
-- ARGV[12] grant channel prefix: a waiter handed the lock is told on it (see
--          mutex_lib.lua)
-- ARGV[13] this waiter's claim window in milliseconds, part of its queue
--          entry: a hand-off grants the lock for the shorter of it and the
--          lease (see queue_lib.lua)
--
-- A re-entry is idempotent per request: a retry whose first attempt ran (its
-- reply was lost) returns the count that attempt reached instead of counting
-- twice.
--
-- Returns its numbers (one string of them, see lock_reply; a lone number as
-- is), written here as arrays:
--   {1, token, count, last, left}  acquired (or found already handed to this
--                      owner while it was queued, and its lease re-set); token
--                      is the fencing token (0 on re-entry), count the hold
--                      count, token..last the tokens reserved for this holder
--                      (found handed: the token granted, and last = token),
--                      and left the number of waiters queued (0 on re-entry)
--   {0, wait, fence}   not acquired; wait is the holder's remaining lease in
--                      milliseconds (-1 when the key has no expiry; a holder
--                      just handed the lock: its claim window), fence the
--                      fencing counter now (the server clock in microseconds
--                      if unset, see fence_seen): a hand-off message
--                      whose tokens are not above it was sent before this call
--                      and is stale
--   token              (a positive number alone) acquired as the first hold,
--                      with the one token asked for (ARGV[8] '1'): {1, token,
--                      1, token, 0}, in the reply of the common case
--   {-1}               re-entry asked for, but this owner's hold is gone (lease lost)
--   {-2}               this owner field was abandoned: the caller gave up on it
--   a NOPERM error     the user may not run a command this call may run
--                      (named in the error): nothing was changed; or, the
--                      lock being free, may not publish on the grant channel
--                      of the waiter queued first: the lock was left free
-- The common case first, written plainly: a first acquisition of a lock that
-- is free, that no one waits for, and whose owner field has no tombstone.
-- Redis runs a script's whole source at every call and makes anew each
-- helper it defines, and Lua pays for each: above the --@helpers line
-- below, only the few leaf helpers this part calls are made (see plainMark
-- in lua.go). It writes nothing unless it takes the lock; anything else (a
-- re-entry, the lock held or waited for, a tombstone, a command refused or
-- failing) goes on to the general path below, which uses what it read
-- (found) and names what it meets.
local found
if ARGV[3] == '0' then
  local lock, fence, lease, block = KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[8])
  -- The checks of lock_denied, made directly (nil before Redis 7: none).
  local may = redis.acl_check_cmd
  found = redis.pcall('EXISTS', lock, KEYS[5], KEYS[3])
  if found == 0 and (not may or
      may('SET', fence, '1', 'PXAT', '1', 'GET') and may('HSET', lock) and may('PEXPIRE', lock)) then
    local time, counter = redis.pcall('TIME'), redis.pcall('GET', fence)
    if not time.err and type(counter) ~= 'table' then
      local now = time[1] * 1000000 + time[2]
      counter = tonumber(counter)
      -- Above the clock and the counter (see fence_lib.lua). With a lease of
      -- FENCE_KEEP_MS or more and the clock ahead of the counter, the hash
      -- records the tokens, not the counter: a lock taken on a new name is
      -- one key.
      local last = math.max(now, counter or 0) + block
      if lease < FENCE_KEEP_MS or counter and counter > now then
        redis.call('SET', fence, string.format('%d', last), 'PXAT', fence_expiry(last, lease, math.floor(now / 1000)))
      end
      -- The hold as lock_hold makes one for a whole lease.
      local first = last - block + 1
      if block == 1 then
        redis.call('HSET', lock, ARGV[1], 1, LOCK_TOKEN, string.format('%d', first))
        redis.call('PEXPIRE', lock, lease)
        return first
      end
      redis.call('HSET', lock, ARGV[1], 1, LOCK_TOKEN, string.format('%d', first), LOCK_LAST, string.format('%d', last))
      redis.call('PEXPIRE', lock, lease)
      return lock_reply(1, first, 1, last, 0)
    end
  end
end
--@helpers
local lock, fence, q = KEYS[1], KEYS[2], {queue = KEYS[4], waiters = KEYS[5], seq = KEYS[6]}
local owner, lease = ARGV[1], ARGV[2]

if ARGV[3] == '1' then
  local denied = lock_denied(function(c)
    return c('SET', KEYS[7]) and c('HINCRBY', lock) and c('PEXPIRE', lock) and fence_lease_may(c, fence, lease)
  end)
  if denied then
    return denied
  end
  local done = lock_call('GET', KEYS[7])
  if done then
    -- Written again so that this call writes something: a WAIT after it on
    -- its connection (WithReplicaAck) then covers the first attempt's writes,
    -- which another connection sent.
    redis.call('SET', KEYS[7], done, 'PX', ARGV[11])
    return lock_reply(1, 0, tonumber(done), 0, 0)
  end
  local held, token, tokens_end = unpack(lock_call('HMGET', lock, owner, LOCK_TOKEN, LOCK_LAST))
  if not held then
    return -1
  end
  local count = redis.call('HINCRBY', lock, owner, 1)
  redis.call('PEXPIRE', lock, lease)
  fence_lease(fence, lock_last(token, tokens_end), lease)
  redis.call('SET', KEYS[7], count, 'PX', ARGV[11])
  return lock_reply(1, 0, count, 0, 0)
end

-- Reads come first, unchecked (lock_call): the first part's EXISTS, when
-- it answered, is not sent again.
local block = tonumber(ARGV[8])
if type(found) ~= 'number' then
  found = lock_call('EXISTS', lock, q.waiters, KEYS[3])
end
local denied
if found == 0 then
  -- Free, no one queued, no tombstone: the first part took it unless a
  -- check or a read of it failed, which is named here (nothing was written).
  denied = lock_denied(function(c)
    return c('SET', fence, '1', 'PXAT', '1', 'GET') and c('HSET', lock) and c('PEXPIRE', lock)
  end)
  if denied then
    return denied
  end
  now_ms()
  lock_call('GET', fence)
  return redis.error_reply('ERR relock: acquire.lua left a free lock untaken')
end
-- Below, the contended paths: the helpers only they call (the queue's and
-- the hand-off's) are made at the next line (see contended in lua.go), by
-- calls that get there.
--@contended
local wait = lock_call('PTTL', lock)
local first = queue_first(q)
-- What the EXISTS found beyond the lock and the queue is the tombstone.
if found > (wait == -2 and 0 or 1) + (first[1] and 1 or 0) then
  return -2
end
denied = lock_denied(function(c)
  return c('HMGET', lock) and c('EXISTS', lock) and mutex_may(c, lock, q, fence)
end)
if denied then
  return denied
end
local entry = queue_entry(owner, lease, ARGV[13], ARGV[10], '')
if wait == -2 then
  -- Free, but others queued first: it goes to the head (who missed its
  -- hand-off, say because the last holder's lease ran out), or is ours if
  -- we are the head.
  local _
  wait, _, denied = mutex_handoff(lock, fence, q, ARGV[6], ARGV[7], ARGV[12], nil, entry, tonumber(ARGV[9]),
    {queue_head(q, first)})
  if denied then
    return denied
  end
  if wait <= 0 then
    local left = 0
    if wait < 0 then
      queue_dequeue(q, entry)
      left = redis.call('ZCARD', q.queue)
    end
    local last = fence_tokens(fence, block, lease)
    lock_hold(lock, owner, last - block + 1, lease, lease, left > 0, block > 1 and last or nil)
    return lock_reply(1, last - block + 1, 1, last, left)
  end
else
  local held = redis.call('HMGET', lock, owner, LOCK_TOKEN)
  if held[1] then
    -- Handed to us while we were queued (its message may be lost or late),
    -- or taken by an attempt of ours whose reply was lost: the token Redis
    -- granted (the counter now for a hash that does not record it, written
    -- by an older version). The lease re-set ends a claim (see lock_claimed).
    redis.call('PEXPIRE', lock, lease)
    local token = tonumber(held[2]) or fence_now(fence, lease)
    return lock_reply(1, token, tonumber(held[1]), token, redis.call('ZCARD', q.queue))
  end
end
if ARGV[4] == '1' then
  local recheck = tonumber(ARGV[5])
  if wait >= 0 then
    recheck = math.min(wait, recheck)
  end
  queue_enqueue(q, entry, recheck, nil, 'blind')
  -- Marked on the holder's hash only: an HSET on a hash that is gone
  -- would leave one with no expiry (a chaos run under CLIENT PAUSE, DEBUG
  -- SLEEP and SIGSTOP found one, unexplained). With no hash, whoever takes
  -- the free lock next finds the queue (acquire.lua's EXISTS) and serves it.
  if redis.call('EXISTS', lock) == 1 then
    redis.call('HSET', lock, LOCK_QUEUED, 1)
  end
end
return lock_reply(0, wait, fence_seen(fence))
