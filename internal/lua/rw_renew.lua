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
-- already ran out (nothing is changed). The zset and hash are kept alive past
-- the new lease, and the fencing counter past it (fence_keep, as
-- rw_keep_readers in rw_lib.lua does): readers share the last writer's token
-- while any of them holds.
-- A refused command fails the batch before it changes anything, naming the
-- command (see lock_denied in publish_lib.lua, prepended at build time;
-- Redis < 7 cannot tell).
local acl = redis.acl_check_cmd
if acl then
  local function refused(cmd, key)
    return lock_refusal(cmd, key or '', 'nothing was changed')
  end
  if not acl('TIME') then
    return refused('TIME')
  end
  for i = 1, #KEYS / 3 do
    local r, n, f = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
    local bad = not acl('ZSCORE', r, 'm') and {'ZSCORE', r} or not acl('ZADD', r, '1', 'm') and {'ZADD', r} or
      not acl('PTTL', r) and {'PTTL', r} or not acl('PEXPIREAT', r, '1') and {'PEXPIREAT', r} or
      not acl('HEXISTS', n, 'f') and {'HEXISTS', n} or not acl('PTTL', n) and {'PTTL', n} or
      not acl('PEXPIREAT', n, '1') and {'PEXPIREAT', n} or not acl('PTTL', f) and {'PTTL', f} or
      not acl('PEXPIREAT', f, '1') and {'PEXPIREAT', f}
    if bad then
      return refused(bad[1], bad[2])
    end
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = now + tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local readers, counts, fence, owner = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  local expiry = redis.call('ZSCORE', readers, owner)
  if expiry and tonumber(expiry) > now and redis.call('HEXISTS', counts, owner) == 1 then
    redis.call('ZADD', readers, 'XX', at, owner)
    for _, key in ipairs({readers, counts}) do
      local pttl = redis.call('PTTL', key)
      if pttl < 0 or now + pttl < at then
        redis.call('PEXPIREAT', key, at + 1)
      end
    end
    fence_keep(fence, now, at)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
