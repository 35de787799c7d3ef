-- sem_renew: extend the leases of many permits in one call (the watchdog's batch).
--
-- KEYS[i]    permits zset of lease i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  permit id of lease i
--
-- Returns an array with one entry per key: 1 when the permit was still held and
-- its lease was extended, 0 when it is gone or already expired (unchanged).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = {}
for i, permits in ipairs(KEYS) do
  local expiry = redis.call('ZSCORE', permits, ARGV[i + 1])
  if expiry and tonumber(expiry) > now then
    redis.call('ZADD', permits, 'XX', now + lease, ARGV[i + 1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
