-- rw_abandon: give up an owner field of an RWMutex: a waiter that stops
-- waiting, an acquisition whose outcome is unknown, or a hold whose release
-- failed. Whatever order the scripts run in, the field ends up neither
-- holding nor queued: the tombstone makes a late rw_acquire.lua refuse it.
-- What is free afterwards goes to the head of the queue (see rw_lib.lua).
-- Idempotent.
--
-- KEYS[1..7] the RWMutex keys (see rw_lib.lua)
-- KEYS[8]    tombstone of the owner field
-- ARGV[1]    owner field
-- ARGV[2]    "r" or "w": what it asked for or holds
-- ARGV[3]    its lease in milliseconds (its queue entry names it); also the
--            tombstone's lifetime (a hold could not outlive it)
-- ARGV[4]    "1" to leave the tombstone, "0" when no rw_acquire.lua for the
--            owner can be in flight
-- ARGV[5]    publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[6]    read channel
-- ARGV[7]    grant channel prefix
-- ARGV[8]    its claim window in milliseconds, and
-- ARGV[9]    its secret: with ARGV[2] and ARGV[3], its queue entry (see rw_lib.lua)
--
-- Returns 1 when the field held the lock and was removed, 0 otherwise; a
-- NOPERM error naming a command the user may not run (nothing changed). A grant
-- that could not be announced is not made (see rw_serve); the field is given
-- up all the same.
local owner, mode, lease = ARGV[1], ARGV[2], ARGV[3]
local denied = lock_denied(function(c)
  return rw_may(c) and c('SET', KEYS[8])
end)
if denied then
  return denied
end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[8], 1, 'PX', lease)
end
queue_dequeue(rwq, queue_entry(owner, lease, ARGV[8], ARGV[9], mode))
local held = 0
if mode == 'w' then
  if redis.call('HEXISTS', KEYS[1], owner) == 1 then
    redis.call('DEL', KEYS[1])
    held = 1
  end
elseif redis.call('HEXISTS', KEYS[3], owner) == 1 then
  rw_drop_reader(owner)
  held = 1
end
local now = now_ms()
rw_reclaim(now)
rw_serve(now, nil, ARGV[5], ARGV[6], ARGV[7])
return held
