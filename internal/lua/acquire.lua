-- acquire: take or re-enter a reentrant lock held as a hash of owner -> hold
-- count. Contended acquisitions queue in arrival order: a free lock goes to the
-- waiter at the head of the queue, and to no one else.
--
-- KEYS[1]  lock hash
-- KEYS[2]  fencing counter (a plain integer key with no expiry; it outlives the lock)
-- KEYS[3]  tombstone of this owner field, written by abandon.lua
-- KEYS[4]  queue zset (see mutex_lib.lua)
-- KEYS[5]  waiter deadlines zset
-- KEYS[6]  arrival counter
-- ARGV[1]  owner field (client id ":" hold id)
-- ARGV[2]  lease in milliseconds, set on the hash on success
-- ARGV[3]  "1" to re-enter an existing hold, "0" for a first acquisition
-- ARGV[4]  "1" to join (or stay in) the queue when not acquired, "0" not to
-- ARGV[5]  waiter lease in milliseconds: how long a queued waiter keeps its
--          place without re-checking
-- ARGV[6]  publish command: PUBLISH or SPUBLISH
-- ARGV[7]  unlock channel
--
-- Returns an array:
--   {1, token, count}  acquired; token is the new fencing token (0 on re-entry),
--                      count the hold count after this acquisition
--   {0, wait, reserved} not acquired; with reserved 0, wait is the holder's
--                      remaining lease in milliseconds (-1 when the key has no
--                      expiry); with reserved 1 the lock is free but reserved
--                      for the head waiter, and wait is the time until that
--                      waiter's place lapses
--   {-1}               re-entry asked for, but this owner's hold is gone (lease lost)
--   {-2}               this owner field was abandoned: the caller gave up on it
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local owner, lease = ARGV[1], ARGV[2]

if ARGV[3] == '1' then
  if redis.call('HEXISTS', lock, owner) == 0 then
    return {-1}
  end
  local count = redis.call('HINCRBY', lock, owner, 1)
  redis.call('PEXPIRE', lock, lease)
  return {1, 0, count}
end

if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-2}
end
local now = now_ms()
mutex_purge(queue, waiters, now)
local head = redis.call('ZRANGE', queue, 0, 0)[1]
local wait, reserved = 0, 0
if redis.call('EXISTS', lock) == 0 then
  if not head or head == owner then
    mutex_dequeue(queue, waiters, owner)
    redis.call('HSET', lock, owner, 1)
    redis.call('PEXPIRE', lock, lease)
    return {1, redis.call('INCR', fence), 1}
  end
  -- Free, but reserved for the head: wake it again in case its message was
  -- lost, and re-check when its place would lapse.
  redis.call(ARGV[6], ARGV[7], '@' .. head)
  wait = math.max(tonumber(redis.call('ZSCORE', waiters, head)) - now, 0)
  reserved = 1
else
  wait = redis.call('PTTL', lock)
end
if ARGV[4] == '1' then
  if redis.call('ZSCORE', queue, owner) == false then
    redis.call('ZADD', queue, redis.call('INCR', KEYS[6]), owner)
  end
  redis.call('ZADD', waiters, now + tonumber(ARGV[5]), owner)
end
return {0, wait, reserved}
