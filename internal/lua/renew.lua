-- renew: extend the leases of many holds in one call (the watchdog's batch).
--
-- KEYS[i]    lock hash of hold i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner field of hold i
--
-- Returns an array with one entry per key: 1 when the owner still held the lock
-- and its lease was extended, 0 when the hold is gone (nothing is changed).
local lease = ARGV[1]
local renewed = {}
for i, lock in ipairs(KEYS) do
  if redis.call('HEXISTS', lock, ARGV[i + 1]) == 1 then
    redis.call('PEXPIRE', lock, lease)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
