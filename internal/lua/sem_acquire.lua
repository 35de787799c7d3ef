-- sem_acquire: take n permits as one lease, in strict arrival order.
-- Idempotent per permit id: a retry of a request whose reply was lost reports
-- the permits the id already holds, and a queued id keeps its arrival number.
--
-- KEYS[1..6]  the semaphore keys (see sem_lib.lua)
-- KEYS[7]     tombstone of this permit id, written by sem_abandon.lua
-- ARGV[1]     permit id (also the waiter id while it waits)
-- ARGV[2]     permits wanted, a positive integer, or "all" for every free permit
-- ARGV[3]     lease in milliseconds
-- ARGV[4]     waiter lease in milliseconds: how long a queued waiter keeps its
--             place without trying again
-- ARGV[5]     publish command: PUBLISH or SPUBLISH
-- ARGV[6]     wake channel
-- ARGV[7]     "1" to join (or stay in) the queue when the permits are not free
--             now, "0" for a one-off attempt that leaves no trace
-- ARGV[8]     limit to establish when none is set (a non-negative integer),
--             marked auto so that the state expires when idle; "" for none
-- ARGV[9]     "1" when the limit must equal ARGV[8] (a Lock), else "0"
--
-- Returns an array:
--   {1, n}      acquired n permits now
--   {1, n, 1}   an earlier request of this id acquired n permits (its reply
--               was lost), and their lease has not run out
--   {0, wait}   not acquired (and queued if ARGV[7] is "1"); wait is the
--               milliseconds until the earliest held permit expires, -1 when
--               none is held
--   {-2}        this permit id was abandoned
--   {-3, limit} more permits asked for than the limit (nothing queued)
--   {-4}        no limit has been set
--   {-5, limit} the limit differs from ARGV[8] and ARGV[9] is "1" (nothing queued)
local id, want, lease, wlease = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[7]) == 1 then
  return {-2}
end
local now = now_ms()
sem_reclaim(now)

local function finish(reply)
  sem_expire(now)
  return reply
end

local held = redis.call('HGET', KEYS[3], id)
if held and redis.call('ZSCORE', KEYS[2], id) then
  -- An earlier request of this id took the permits; its reply was lost.
  sem_dequeue(id)
  return finish({1, tonumber(held), 1})
end

sem_establish(ARGV[8])
local avail = sem_available()
if not avail then
  sem_dequeue(id)
  sem_wake_head(ARGV[5], ARGV[6])
  return finish({-4})
end
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if ARGV[9] == '1' and limit ~= tonumber(ARGV[8]) then
  sem_dequeue(id)
  sem_wake_head(ARGV[5], ARGV[6])
  return finish({-5, limit})
end
local n
if want == 'all' then
  n = avail
else
  n = tonumber(want)
  if n > limit then
    sem_dequeue(id)
    sem_wake_head(ARGV[5], ARGV[6])
    return finish({-3, limit})
  end
end

local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if n > 0 and avail >= n and (not head or head == id) then
  sem_dequeue(id)
  redis.call('HINCRBY', KEYS[1], 'used', n)
  redis.call('ZADD', KEYS[2], now + lease, id)
  redis.call('HSET', KEYS[3], id, n)
  -- Permits may remain for the next in line.
  sem_wake_head(ARGV[5], ARGV[6])
  return finish({1, n})
end
local wait = -1
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  wait = math.max(tonumber(first[2]) - now, 0)
end
if want == 'all' or ARGV[7] ~= '1' then
  return finish({0, wait})
end

-- A waiter already queued keeps its arrival number.
if redis.call('ZSCORE', KEYS[4], id) == false then
  redis.call('ZADD', KEYS[4], redis.call('HINCRBY', KEYS[1], 'seq', 1), id)
  redis.call('HSET', KEYS[6], id, n)
end
redis.call('ZADD', KEYS[5], now + wlease, id)
-- The head may have missed its wake (a lost message, a dead waiter replaced).
if head and head ~= id then
  sem_wake_head(ARGV[5], ARGV[6])
end
return finish({0, wait})
