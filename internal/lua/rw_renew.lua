-- rw_renew: extend the leases of many read holds of RWMutexes in one call
-- (the watchdog's batch). Write holds are renewed by renew.lua, on the
-- writer hash.
--
-- KEYS[3i-2] readers zset of hold i (see rw_lib.lua)
-- KEYS[3i-1] reader counts hash of hold i (same RWMutex)
-- KEYS[3i]   fencing counter of hold i (same RWMutex)
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner field of hold i
--
-- Returns an array with one entry per hold: 1 when the reader still held its
-- read lock and its lease was extended, 0 when the hold is gone or its lease
-- already ran out (nothing is changed). The new lease is a whole millisecond:
-- a claim's grant renewed is one no more (see lease_score in publish_lib.lua).
-- The zset and hash are kept alive past the new lease, and the fencing
-- counter past it (fence_keep in fence_lib.lua): readers share the last
-- writer's token while any of them holds.
-- A refused command fails the batch before it changes anything, naming the
-- command (see lock_denied in publish_lib.lua, prepended at build time;
-- Redis < 7 cannot tell).
local denied = lock_denied(function(c)
  local ok = c('TIME')
  for i = 1, #KEYS / 3 do
    local r, n, f = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
    ok = ok and c('ZSCORE', r) and c('ZADD', r) and c('PTTL', r) and c('PEXPIREAT', r) and
      c('HEXISTS', n) and c('PTTL', n) and c('PEXPIREAT', n) and c('PTTL', f) and c('PEXPIREAT', f)
  end
  return ok
end)
if denied then
  return denied
end
local now = now_ms()
local at = now + tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local readers, counts, fence, owner = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  local expiry = redis.call('ZSCORE', readers, owner)
  if expiry and tonumber(expiry) > now and redis.call('HEXISTS', counts, owner) == 1 then
    redis.call('ZADD', readers, 'XX', at, owner)
    fence_keep(fence, now, at, readers, counts)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
