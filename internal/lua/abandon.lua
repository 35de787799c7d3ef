-- abandon: give up an owner field: a waiter that stops waiting, or an
-- acquisition whose outcome is unknown (the caller's context ended, or the
-- connection failed, while acquire.lua was in flight). Whatever order the two
-- scripts run in, the field ends up neither holding the lock nor queued: the
-- tombstone makes a late acquire.lua refuse it.
--
-- KEYS[1]  lock hash
-- KEYS[2]  tombstone of the owner field
-- KEYS[3]  queue zset (see mutex_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- ARGV[1]  owner field
-- ARGV[2]  tombstone lifetime in milliseconds (the lease: a hold could not outlive it)
-- ARGV[3]  publish command: PUBLISH or SPUBLISH
-- ARGV[4]  unlock channel
-- ARGV[5]  unlock message for listeners when no one is queued
--
-- Returns 1 when the field held the lock and was removed, 0 otherwise. When the
-- lock is free afterwards it is announced, so that the next waiter is not
-- delayed by the one that left.
local lock, owner = KEYS[1], ARGV[1]
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
mutex_dequeue(KEYS[3], KEYS[4], owner)
local held = redis.call('HDEL', lock, owner)
if held == 1 and redis.call('HLEN', lock) == 0 then
  redis.call('DEL', lock)
end
if redis.call('EXISTS', lock) == 0 and (held == 1 or head == owner) then
  mutex_purge(KEYS[3], KEYS[4], now_ms())
  mutex_announce(KEYS[3], ARGV[3], ARGV[4], ARGV[5])
end
return held
