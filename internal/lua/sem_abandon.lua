-- sem_abandon: give up a waiter or an acquisition with an unknown outcome: take
-- the id out of the queue, return any permits it holds, and wake the next in
-- line. The tombstone makes a late sem_acquire.lua for the id refuse.
--
-- KEYS[1..6]  the semaphore keys (see sem_lib.lua)
-- KEYS[7]     tombstone of the permit id
-- ARGV[1]     permit id
-- ARGV[2]     tombstone lifetime in milliseconds
-- ARGV[3]     publish command
-- ARGV[4]     wake channel
--
-- Returns the permits returned to the pool (0 when it held none).
local id = ARGV[1]
redis.call('SET', KEYS[7], 1, 'PX', ARGV[2])
local now = now_ms()
sem_reclaim(now)
sem_dequeue(id)
local n = tonumber(redis.call('HGET', KEYS[3], id) or '0')
if n > 0 then
  sem_unuse(n)
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[2], id)
end
sem_wake_head(ARGV[3], ARGV[4])
sem_expire(now)
return n
