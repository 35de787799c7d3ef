-- forceunlock: delete a lock whoever holds it and hand it to the head waiter,
-- or announce it free when no one is queued (see mutex_lib.lua).
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue zset (see mutex_lib.lua)
-- KEYS[3]  waiter deadlines zset
-- KEYS[4]  fencing counter
-- ARGV[1]  publish command: PUBLISH or SPUBLISH
-- ARGV[2]  unlock channel
-- ARGV[3]  unlock message for listeners when no one is queued
-- ARGV[4]  fencing tokens to reserve for a queued waiter handed the lock
--
-- Returns 1 when a lock was deleted (and handed on or announced), 0 when none existed.
if redis.call('DEL', KEYS[1]) == 1 then
  mutex_handoff(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], nil, tonumber(ARGV[4]))
  return 1
end
return 0
