-- abandon: give up an owner field: a waiter that stops waiting, or an
-- acquisition whose outcome is unknown (the caller's context ended, or the
-- connection failed, while acquire.lua was in flight, or the lock was handed
-- to it as it left). Whatever order the scripts run in, the field ends up
-- neither holding the lock nor queued: the tombstone makes a late acquire.lua
-- refuse it.
--
-- KEYS[1]  lock hash
-- KEYS[2]  tombstone of the owner field
-- KEYS[3]  queue zset (see queue_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- KEYS[5]  fencing counter
-- ARGV[1]  owner field
-- ARGV[2]  the owner's lease in milliseconds (its queue entry names it); also
--          the tombstone's lifetime (a hold could not outlive it)
-- ARGV[3]  publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[4]  unlock channel
-- ARGV[5]  unlock message for listeners when no one is queued
-- ARGV[6]  fencing tokens to reserve for a queued waiter handed the lock
-- ARGV[7]  "1" to leave the tombstone, "0" when no acquire.lua for the owner
--          can be in flight (a waiter that got the lock otherwise)
-- ARGV[8]  the owner's secret (its queue entry names it)
-- ARGV[9]  grant channel prefix (see queue_lib.lua)
-- ARGV[10] the owner's claim window in milliseconds (its queue entry names it)
--
-- Returns 1 when the field held the lock and was removed, 0 otherwise. When the
-- lock is free afterwards it goes to the head waiter (or is announced when this
-- owner held it), so that the next waiter is not delayed by the one that left.
-- A NOPERM error names a command this call may run that the user may not:
-- nothing was changed.
local lock, owner, q = KEYS[1], ARGV[1], {queue = KEYS[3], waiters = KEYS[4]}
-- (Messages that may not be published are left out, and a head waiter who
-- could not be told is not handed the lock: see mutex_handoff. The owner
-- field is given up all the same.)
local denied = lock_denied(function(c)
  return c('HMGET', lock) and c('SET', KEYS[2]) and c('HDEL', lock) and
    c('EXISTS', lock) and mutex_may(c, lock, q, KEYS[5])
end)
if denied then
  return denied
end
if ARGV[7] == '1' then
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
end
queue_dequeue(q, queue_entry(owner, ARGV[2], ARGV[10], ARGV[8], ''))
-- The hold's last token, if the owner holds, which the counter may not
-- record (see fence_lib.lua).
local hold_last
local count, token, tokens_end = unpack(redis.call('HMGET', lock, owner, LOCK_TOKEN, LOCK_LAST))
if count then
  hold_last = lock_last(token, tokens_end)
end
local held = redis.call('HDEL', lock, owner)
if held == 1 then
  -- A Mutex has one holder: its token and claim (see LOCK_TOKEN) go with it.
  redis.call('DEL', lock)
end
if held == 1 or redis.call('EXISTS', lock) == 0 then
  local message = nil
  if held == 1 then
    message = ARGV[5]
  end
  local _, last = mutex_handoff(lock, KEYS[5], q, ARGV[3], ARGV[4], ARGV[9], message, nil, tonumber(ARGV[6]), nil,
    hold_last)
  if last == 0 then
    fence_free(KEYS[5], hold_last, ARGV[2])
  end
end
return held
