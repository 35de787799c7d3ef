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
-- already ran out (nothing is changed), -1 when reading the hold met an error
-- (its readers zset or counts hash is of the wrong type: someone else's key,
-- or one written in its place): nothing of that hold is changed, and the other
-- holds of the batch are renewed all the same. The new lease is a whole
-- millisecond: a claim's grant renewed is one no more (see lease_score in
-- publish_lib.lua).
-- The zset and hash are kept alive past the new lease, and the fencing
-- counter past it (fence_keep in fence_lib.lua): readers share the last
-- writer's token while any of them holds.
-- A hold is changed only once the keys it reads were read without error. Its
-- first write is a PEXPIREAT: over maxmemory (noeviction) Redis refuses a ZADD
-- as a script's first write, but runs a PEXPIREAT and every write after it,
-- so renewals go on while Redis refuses new data, as the Mutex's do
-- (renew.lua).
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
-- Whether the reply r of a redis.pcall is an error.
local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end
local renewed = {}
for i = 1, #KEYS / 3 do
  local readers, counts, fence, owner = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  -- Reads first, each allowed to fail: a key of the wrong type fails its
  -- hold alone, before anything of it is changed, and no write below can
  -- fail on a key read here (fence_keep's PTTL and PEXPIREAT take any type).
  local expiry = redis.pcall('ZSCORE', readers, owner)
  local live = not failed(expiry) and expiry and tonumber(expiry) > now
  local counted = live and redis.pcall('HEXISTS', counts, owner)
  if failed(expiry) or failed(counted) then
    renewed[i] = -1
  elseif live and counted == 1 then
    -- The zset outlives the lease it is given, as fence_keep makes it (no
    -- later expiry is cut): the first write, so that Redis over maxmemory
    -- lets the ZADD run.
    redis.call('PEXPIREAT', readers, at + 1, 'GT')
    redis.call('ZADD', readers, 'XX', at, owner)
    fence_keep(fence, now, at, readers, counts)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
