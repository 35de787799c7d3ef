-- forceunlock: delete a lock whoever holds it and hand it to the head waiter,
-- or announce it free when no one is queued (see mutex_lib.lua). Each former
-- owner field is told by a message '@' .. owner .. ' !' on its Client's grant
-- channel, so that a Client still holding it stops passing the lock to its own
-- goroutines.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue zset (see queue_lib.lua)
-- KEYS[3]  waiter deadlines zset
-- KEYS[4]  fencing counter
-- ARGV[1]  publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[2]  unlock channel
-- ARGV[3]  unlock message for listeners when no one is queued
-- ARGV[4]  fencing tokens to reserve for a queued waiter handed the lock
-- ARGV[5]  grant channel prefix (see queue_lib.lua)
--
-- Returns 1 when a lock was deleted (and handed on or announced), 0 when none
-- existed; a NOPERM error naming a command this call may run that the user
-- may not (the unlock channel, or a former owner's grant channel, included):
-- nothing was changed.
local q = {queue = KEYS[2], waiters = KEYS[3]}
local denied = lock_denied(function(c)
  return c('HKEYS', KEYS[1]) and c('HMGET', KEYS[1]) and c('PTTL', KEYS[1]) and mutex_may(c, KEYS[1], q, KEYS[4]) and
    c(lock_publish_name(ARGV[1]), ARGV[2], 'm')
end)
if denied then
  return denied
end
local owners = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if lock_owner(field) then -- (not the holder's token or claim, see LOCK_TOKEN)
    owners[#owners + 1] = field
  end
end
-- The hold's last token, which the counter may not record (see fence_lib.lua),
-- is kept as long as Redis would have kept the hold.
local hold_last = lock_last(unpack(redis.call('HMGET', KEYS[1], LOCK_TOKEN, LOCK_LAST)))
local keep = hold_last and now_ms() + redis.call('PTTL', KEYS[1]) - math.ceil(hold_last / 1000)
for _, owner in ipairs(owners) do
  denied = lock_denied(function(c)
    return c(lock_publish_name(ARGV[1]), queue_channel(ARGV[5], owner), 'm')
  end)
  if denied then
    return denied
  end
end
if redis.call('DEL', KEYS[1]) == 1 then
  for _, owner in ipairs(owners) do
    lock_publish(ARGV[1], queue_channel(ARGV[5], owner), '@' .. owner .. ' !')
  end
  local _, last = mutex_handoff(KEYS[1], KEYS[4], q, ARGV[1], ARGV[2], ARGV[5], ARGV[3], nil, tonumber(ARGV[4]), nil,
    hold_last)
  if last == 0 then
    fence_free(KEYS[4], hold_last, keep)
  end
  return 1
end
return 0
