-- release: drop one level of a reentrant hold; the last level frees the lock
-- and hands it to the head waiter in the same step (see mutex_lib.lua), or,
-- with no one queued, announces it to anyone listening.
--
-- A holder may name a successor: a goroutine of its own process that waits
-- for the lock. The last level then either queues the successor at the tail
-- in the same step (others were queued: the lock goes to the head and the
-- process gets its next turn after them), or, when no one else is queued,
-- keeps the lock for the holder's owner field with its lease re-set and a new
-- block of fencing tokens, so the holder passes it on locally (cohorting, see
-- core.Turns, internal/core/turns.go) without a round trip per holder.
--
-- Idempotent per request id: a retry of a release whose reply was lost returns
-- the first outcome instead of decrementing again.
--
-- KEYS[1]  lock hash
-- KEYS[2]  result latch for this request (same hash tag as the lock)
-- KEYS[3]  queue zset (see queue_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- KEYS[5]  fencing counter
-- KEYS[6]  arrival counter
-- KEYS[7]  tombstone of this owner field (see ARGV[10])
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, re-set while holds remain (or the lock is kept)
-- ARGV[3]  publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[4]  unlock channel
-- ARGV[5]  unlock message for listeners when no one is queued, or '' for none
-- ARGV[6]  latch lifetime in milliseconds
-- ARGV[7]  fencing tokens to reserve for a waiter handed the lock (or kept)
-- ARGV[8]  successor's queue entry (see queue_lib.lua), or '' for none
-- ARGV[9]  the longest the successor waits before re-checking (ms; see
--          acquire.lua's ARGV[5]); sooner when the lock is granted for less
-- ARGV[10] tombstone lifetime in milliseconds, or '0': when an acquisition
--          attempt of this owner field may still run late (its reply was
--          lost), freeing the field leaves a tombstone so that it is refused
-- ARGV[11] grant channel prefix (see queue_lib.lua)
-- ARGV[12] '1' when the successor is a place reserved for the holder's process
--          (its next Lock is expected, no goroutine waits yet): it is queued
--          only behind other waiters; with no one else queued the lock is
--          freed, not kept
-- ARGV[13] '1' when an earlier attempt of this request may have run (a retry
--          after a lost reply): only then is the result latch read
--
-- Returns its numbers (one string of them, as the result latch keeps them,
-- see lock_reply; a lone number as is), written here as arrays:
--   {left}              left >= 1: holds left; {0}: the lock was freed (and
--                       handed on or announced); no successor was named
--   {-1}                the owner does not hold the lock
--   {0, fence, lease}   freed and handed to the head waiter for lease (ms, its
--                       claim window when shorter than its lease);
--                       the successor is queued behind the others; fence is
--                       the fencing counter after the hand-off
--   {-4}                freed; the reserved successor (ARGV[12]) was not
--                       queued, as no one else was
--   {-3, first, last}   kept: a successor was named and no one else is
--                       queued; the lock stays with the owner field, lease re-set,
--                       with the fencing tokens first..last reserved (the hash
--                       records first as the holder's token)
--   a NOPERM error      the user may not run a command this call may run
--                       (named in the error, the final level's PUBLISH on the
--                       unlock channel included): nothing was changed; or
--                       may not publish on the grant channel of the waiter
--                       queued first: the lock was freed, not handed to it
-- The common case first, written plainly (see acquire.lua): a final level
-- with no one queued (LOCK_QUEUED), no successor and nothing to announce;
-- and a retry's latch. It writes nothing unless it frees the lock; anything
-- else (a level left, someone queued, a command refused or failing) goes on
-- to the general path below, which uses what it read (hold) and names what
-- it meets.
local hold
if ARGV[8] == '' and ARGV[5] == '' then
  local lock, latch, fence = KEYS[1], KEYS[2], KEYS[5]
  local done = ARGV[13] == '1' and redis.pcall('GET', latch)
  if type(done) == 'string' then
    return done
  end
  hold = not done and redis.pcall('HMGET', lock, ARGV[1], LOCK_QUEUED, LOCK_TOKEN, LOCK_LAST)
  local count = hold and tonumber(hold[1])
  -- The checks of lock_denied, made directly (nil before Redis 7: none).
  local may = redis.acl_check_cmd
  if count and count <= 1 and not hold[2] and (not may or (ARGV[10] == '0' or may('SET', KEYS[7])) and
      may('DEL', lock) and may('SET', fence, '1', 'PXAT', '1', 'GET') and may('SET', latch)) then
    -- The counter first: a key of another kind there fails the script
    -- before anything changed.
    fence_free(fence, lock_last(hold[3], hold[4]), ARGV[2])
    lock_bury(KEYS[7], ARGV[10])
    redis.call('DEL', lock)
    redis.call('SET', latch, '0', 'PX', ARGV[6])
    return 0
  end
end
--@helpers
local lock, latch, fence = KEYS[1], KEYS[2], KEYS[5]
local q = {queue = KEYS[3], waiters = KEYS[4], seq = KEYS[6]}
local owner, lease = ARGV[1], ARGV[2]
-- Reads come first, unchecked (lock_call). When the first part read the
-- hold (and found the latch empty, if it looked), they are not sent again.
if type(hold) ~= 'table' or hold.err then
  local done = ARGV[13] == '1' and lock_call('GET', latch)
  if done then
    return done
  end
  hold = lock_call('HMGET', lock, owner, LOCK_QUEUED, LOCK_TOKEN, LOCK_LAST)
end
local count, queued, token, tokens_end = unpack(hold)
if not count then
  return -1
end
-- The hold's last token, which the counter may not record (see fence_lib.lua).
local hold_last = lock_last(token, tokens_end)
local left = tonumber(count) - 1
-- The message announcing a free lock when no one is queued, if any
-- (QuorumMutex waiters listen for it; a Mutex's waiters queue).
local message = ARGV[5] ~= '' and ARGV[5] or nil
if left <= 0 and message and not lock_may_publish(ARGV[3], ARGV[4]) then
  -- The final level announces the lock or hands it on: refused before it
  -- changes anything, rather than freed with no one told.
  return lock_refusal(lock_publish_name(ARGV[3]), ARGV[4], 'nothing was changed')
end
if left <= 0 and not queued and ARGV[8] == '' and not message then
  -- No one queued, no successor, nothing to announce: the first part freed
  -- it unless a check failed, which is named here (nothing was written).
  return lock_denied(function(c)
    return (ARGV[10] == '0' or c('SET', KEYS[7])) and c('DEL', lock) and
      c('SET', fence, '1', 'PXAT', '1', 'GET') and c('SET', latch)
  end) or redis.error_reply('ERR relock: release.lua left a free lock held')
end
-- Below, the contended paths: the helpers only they call (the queue's and
-- the hand-off's) are made at the next line (see contended in lua.go), by
-- calls that get there.
--@contended
-- The first waiter, read only when someone may be queued (LOCK_QUEUED).
local first = left <= 0 and (queued and queue_first(q) or {})
local denied
if left <= 0 and (ARGV[8] ~= '' or first[1]) then
  denied = lock_denied(function(c)
    return c('SET', KEYS[7]) and mutex_may(c, lock, q, fence, ARGV[8] == '') and c('SET', latch)
  end)
elseif left <= 0 then
  denied = lock_denied(function(c)
    return (ARGV[10] == '0' or c('SET', KEYS[7])) and c('DEL', lock) and
      c('SET', fence, '1', 'PXAT', '1', 'GET') and c('SET', latch)
  end)
else
  denied = lock_denied(function(c)
    return c('HSET', lock) and c('PEXPIRE', lock) and fence_lease_may(c, fence, lease) and c('SET', latch)
  end)
end
if denied then
  return denied
end
local block = tonumber(ARGV[7])
local reply
if left > 0 then
  redis.call('HSET', lock, owner, left)
  redis.call('PEXPIRE', lock, lease)
  fence_lease(fence, hold_last, lease)
  reply = string.format('%d', left)
elseif ARGV[8] == '' then
  lock_bury(KEYS[7], ARGV[10])
  redis.call('DEL', lock)
  local _, last
  _, last, denied = mutex_handoff(lock, fence, q, ARGV[3], ARGV[4], ARGV[11], message, nil, block,
    {queue_head(q, first)}, hold_last)
  if last == 0 then
    fence_free(fence, hold_last, lease)
  end
  reply = '0'
else
  local head, arrival, behind = queue_head(q, first)
  if not head and ARGV[12] == '1' then
    lock_bury(KEYS[7], ARGV[10])
    redis.call('DEL', lock)
    denied = select(3, mutex_handoff(lock, fence, q, ARGV[3], ARGV[4], ARGV[11], message, nil, block, {}))
    fence_free(fence, hold_last, lease)
    reply = '-4'
  elseif not head then
    local last = fence_tokens(fence, block, lease, hold_last)
    -- The first token goes to the successor, the lease re-set ends a claim
    -- (see LOCK_TOKEN).
    redis.call('HSET', lock, LOCK_TOKEN, string.format('%d', last - block + 1), LOCK_LAST, string.format('%d', last))
    redis.call('PEXPIRE', lock, lease)
    reply = string.format('-3 %d %d', last - block + 1, last)
  else
    lock_bury(KEYS[7], ARGV[10])
    redis.call('DEL', lock)
    -- Queued before the hand-off, so that the grant counts it among the
    -- waiters behind the new holder (which then knows to take turns).
    queue_enqueue(q, ARGV[8], tonumber(ARGV[9]), nil, 'blind')
    if #behind < QUEUE_CHASE and head ~= ARGV[8] and behind[1] ~= ARGV[8] then
      behind[#behind + 1] = ARGV[8]
    end
    local granted, last
    granted, last, denied = mutex_handoff(lock, fence, q, ARGV[3], ARGV[4], ARGV[11], message, nil, block,
      {head, arrival, behind}, hold_last)
    -- The successor re-checks when the grant lapses (at once when none was
    -- made), as the reply tells its Client.
    local _, successor_lease = queue_parse(ARGV[8])
    redis.call('ZADD', q.waiters, 'XX', now_ms() + math.min(math.max(granted, 0), tonumber(ARGV[9])) +
      queue_grace(successor_lease or 0), ARGV[8])
    if last == 0 then
      fence_free(fence, hold_last, lease)
      last = fence_seen(fence)
    end
    reply = string.format('0 %d %d', last, granted)
  end
end
if denied then
  -- (No latch: the refusal is final, the Client does not retry it.)
  return denied
end
redis.call('SET', latch, reply, 'PX', ARGV[6])
return reply
