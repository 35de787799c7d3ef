-- renew: extend the leases of many holds in one call (the watchdog's batch).
--
-- KEYS[i]    lock hash of hold i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner field of hold i
--
-- Returns an array with one entry per key: 1 when the owner still held the lock
-- and its lease was extended, 0 when the hold is gone (nothing is changed), -1
-- when reading the hold met an error (its key is not a hash: someone else's
-- key, or one written in its place): nothing of that hold is changed, and the
-- other holds of the batch are renewed all the same; or a NOPERM error naming
-- a command the user may not run: nothing was changed.
-- The first write is a PEXPIRE, which Redis runs over maxmemory (noeviction):
-- renewals go on while Redis refuses new data.
local lease = ARGV[1]
-- A refused command fails the batch before it extends any lease, naming the
-- command (see lock_denied in publish_lib.lua, prepended at build time;
-- Redis < 7 cannot tell).
local denied = lock_denied(function(c)
  local ok = true
  for _, lock in ipairs(KEYS) do
    ok = ok and c('HEXISTS', lock) and c('PEXPIRE', lock)
  end
  return ok
end)
if denied then
  return denied
end
local renewed = {}
for i, lock in ipairs(KEYS) do
  -- One hold's key of the wrong type fails that hold alone, not the batch.
  local held = redis.pcall('HEXISTS', lock, ARGV[i + 1])
  if type(held) == 'table' and held.err then
    renewed[i] = -1
  elseif held == 1 then
    redis.call('PEXPIRE', lock, lease)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
