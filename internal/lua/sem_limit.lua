-- sem_limit: set the limit of a semaphore, or read its state.
--
-- KEYS[1..6]  the semaphore keys (see sem_lib.lua)
-- ARGV[1]     "get", "init" (set only if no limit is set) or "set"
-- ARGV[2]     the new limit, a non-negative integer (ignored by "get")
-- ARGV[3]     publish command
-- ARGV[4]     wake channel
-- ARGV[5]     "get" only: limit to establish (marked auto) when none is set,
--             a non-negative integer, or "" for none
--
-- Returns {changed, limit, used, queued}: changed is 1 when the limit was
-- written; limit is -1 when none is set. Raising the limit wakes the head waiter;
-- lowering it lets current holders finish (used may exceed limit until they do).
-- "init" and "set" make the state permanent (no auto mark, no expiry), whether
-- or not they write the limit: a limit set by hand cannot be re-established.
local now = now_ms()
sem_reclaim(now)
local changed = 0
if ARGV[1] == 'set' or (ARGV[1] == 'init' and redis.call('HEXISTS', KEYS[1], 'limit') == 0) then
  redis.call('HSET', KEYS[1], 'limit', ARGV[2])
  changed = 1
  sem_wake_head(ARGV[3], ARGV[4])
end
if ARGV[1] == 'get' then
  sem_establish(ARGV[5] or '')
else
  redis.call('HDEL', KEYS[1], 'auto')
  redis.call('PERSIST', KEYS[1])
end
sem_expire(now)
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '-1')
local used = tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
return {changed, limit, used, redis.call('ZCARD', KEYS[4])}
