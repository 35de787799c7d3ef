-- release: drop one level of a reentrant hold; the last level frees the lock
-- and hands it to the head waiter in the same step (see mutex_lib.lua), or,
-- with no one queued, announces it to anyone listening.
-- Idempotent per request id: a retry of a release whose reply was lost returns
-- the first outcome instead of decrementing again.
--
-- KEYS[1]  lock hash
-- KEYS[2]  result latch for this request (same hash tag as the lock)
-- KEYS[3]  queue zset (see mutex_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- KEYS[5]  fencing counter
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, re-set while holds remain
-- ARGV[3]  publish command: PUBLISH or SPUBLISH
-- ARGV[4]  unlock channel
-- ARGV[5]  unlock message for listeners when no one is queued
-- ARGV[6]  latch lifetime in milliseconds
-- ARGV[7]  fencing tokens to reserve for a queued waiter handed the lock
--
-- Returns the hold count left after the release (0: this owner no longer holds
-- the lock, which went to the next waiter or was announced free), or -1 when
-- the owner does not hold the lock.
local lock, latch = KEYS[1], KEYS[2]
local owner = ARGV[1]

local done = redis.call('GET', latch)
if done then
  return tonumber(done)
end
local count = redis.call('HGET', lock, owner)
if not count then
  return -1
end
local left = tonumber(count) - 1
if left > 0 then
  redis.call('HSET', lock, owner, left)
  redis.call('PEXPIRE', lock, ARGV[2])
else
  redis.call('DEL', lock)
  mutex_handoff(lock, KEYS[5], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5], nil, tonumber(ARGV[7]))
end
redis.call('SET', latch, left, 'PX', ARGV[6])
return left
