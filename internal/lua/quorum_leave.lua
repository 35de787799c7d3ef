-- quorum_leave: a Lock call of a quorum lock that ends without the lock gives
-- up its place at the gate (see quorum_acquire.lua), so that the next caller
-- need not wait for the claim window in its stead.
--
-- KEYS[1]  the gate's reservation
-- ARGV[1]  the caller's id
--
-- Returns 1 when the reservation was the caller's and is gone, 0 otherwise;
-- a NOPERM error when the user may not run GET or DEL on it (nothing
-- changed).
local denied = lock_denied(function(c)
  return c('GET', KEYS[1]) and c('DEL', KEYS[1])
end)
if denied then
  return denied
end
local r = redis.call('GET', KEYS[1])
if r and string.match(r, '^%d+ (%S+)') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
