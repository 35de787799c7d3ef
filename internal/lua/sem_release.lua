-- sem_release: give back the permits of one lease and wake the next waiter.
-- Idempotent per request id, like release.lua.
--
-- KEYS[1..6]  the semaphore keys (see sem_lib.lua)
-- KEYS[7]     result latch of this request
-- ARGV[1]     permit id
-- ARGV[2]     publish command
-- ARGV[3]     wake channel
-- ARGV[4]     latch lifetime in milliseconds
--
-- Returns the permits released, -1 when the id holds none (never acquired or
-- already released), -2 when its lease had already expired (the permits went
-- back to the pool then).
local id = ARGV[1]
local done = redis.call('GET', KEYS[7])
if done then
  return tonumber(done)
end
local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[2], id)
if not expiry then
  sem_reclaim(now)
  sem_expire(now)
  return -1
end
if tonumber(expiry) <= now then
  sem_reclaim(now)
  sem_wake_head(ARGV[2], ARGV[3])
  sem_expire(now)
  return -2
end
local n = tonumber(redis.call('HGET', KEYS[3], id) or '0')
sem_unuse(n)
redis.call('HDEL', KEYS[3], id)
redis.call('ZREM', KEYS[2], id)
sem_reclaim(now)
sem_wake_head(ARGV[2], ARGV[3])
sem_expire(now)
redis.call('SET', KEYS[7], n, 'PX', ARGV[4])
return n
