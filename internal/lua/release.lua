-- release: drop one level of a reentrant hold; the last level deletes the lock
-- and announces it (to the head waiter by name, or to anyone with no queue).
-- Idempotent per request id: a retry of a release whose reply was lost returns
-- the first outcome instead of decrementing again.
--
-- KEYS[1]  lock hash
-- KEYS[2]  result latch for this request (same hash tag as the lock)
-- KEYS[3]  queue zset (see mutex_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, re-set while holds remain
-- ARGV[3]  publish command: PUBLISH or SPUBLISH
-- ARGV[4]  unlock channel
-- ARGV[5]  unlock message for listeners when no one is queued
-- ARGV[6]  latch lifetime in milliseconds
--
-- Returns the hold count left after the release (0: the lock is free and was
-- announced), or -1 when the owner does not hold the lock.
local lock, latch = KEYS[1], KEYS[2]
local owner = ARGV[1]

local done = redis.call('GET', latch)
if done then
  return tonumber(done)
end
if redis.call('HEXISTS', lock, owner) == 0 then
  return -1
end
local left = redis.call('HINCRBY', lock, owner, -1)
if left > 0 then
  redis.call('PEXPIRE', lock, ARGV[2])
else
  redis.call('DEL', lock)
  mutex_purge(KEYS[3], KEYS[4], now_ms())
  mutex_announce(KEYS[3], ARGV[3], ARGV[4], ARGV[5])
end
redis.call('SET', latch, left, 'PX', ARGV[6])
return left
