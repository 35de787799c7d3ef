-- sem_renew: extend the leases of many permits in one call (the watchdog's batch).
--
-- KEYS[3i-2]  permits zset of lease i
-- KEYS[3i-1]  counts hash of lease i (same semaphore)
-- KEYS[3i]    state hash of lease i (same semaphore)
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   permit id of lease i
--
-- Returns an array with one entry per lease: 1 when the permit was still held
-- and its lease was extended, 0 when it is gone or already expired (unchanged).
-- The expiries of the lease's keys follow (see sem_lib.lua): the permits zset
-- and counts hash expire with their last lease, and a state hash that expires
-- at all outlives it by the idle bound, SEM_IDLE_MS of sem_lib.lua.
local IDLE_MS = 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local permits, counts, state, id = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  local expiry = redis.call('ZSCORE', permits, id)
  if expiry and tonumber(expiry) > now then
    redis.call('ZADD', permits, 'XX', now + lease, id)
    local last = tonumber(redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')[2])
    redis.call('PEXPIREAT', permits, last + 1)
    redis.call('PEXPIREAT', counts, last + 1)
    local ttl = redis.call('PTTL', state)
    if ttl >= 0 and now + ttl < last + IDLE_MS then
      redis.call('PEXPIREAT', state, last + IDLE_MS)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
