-- forceunlock: delete a lock whoever holds it and announce it.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue zset (see mutex_lib.lua)
-- KEYS[3]  waiter deadlines zset
-- ARGV[1]  publish command: PUBLISH or SPUBLISH
-- ARGV[2]  unlock channel
-- ARGV[3]  unlock message for listeners when no one is queued
--
-- Returns 1 when a lock was deleted (and announced), 0 when none existed.
if redis.call('DEL', KEYS[1]) == 1 then
  mutex_purge(KEYS[2], KEYS[3], now_ms())
  mutex_announce(KEYS[2], ARGV[1], ARGV[2], ARGV[3])
  return 1
end
return 0
