-- quorum_acquire: one master's vote for a quorum lock (rlock.Quorum, the
-- Redlock algorithm): take the lock hash for owner when it is free. A quorum
-- lock has no queue and no fencing counter on its masters: waiters wait on the
-- unlock channel of each master and retry, and a token from one master of
-- several would prove nothing (see rlock/quorum.go). The hash has the Mutex's
-- shape (owner field -> 1), so release.lua, renew.lua and abandon.lua serve it
-- unchanged; its queue keys stay empty, so a release announces the lock on
-- the unlock channel.
--
-- KEYS[1]  lock hash
-- KEYS[2]  tombstone of this owner field, written by abandon.lua
-- ARGV[1]  owner field (the same on every master for one acquisition)
-- ARGV[2]  lease in milliseconds
--
-- Returns an array:
--   {1}                  acquired, or already this owner's (an attempt whose
--                        reply was lost): the lease is (re)set
--   {0, wait, holder}    held by another owner: wait is its remaining lease in
--                        milliseconds (-1 when the key has no expiry), holder
--                        its owner field ('' if unknown), so that the caller
--                        can tell one holder of a majority from a split vote
--   {-2}                 this owner field was abandoned: never reuse it
--   a NOPERM error       the user may not run a command this call may run
--                        (named in the error): nothing changed
local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]
local denied = lock_denied(function(c)
  return c('EXISTS', KEYS[2]) and c('PTTL', lock) and c('HSET', lock) and
    c('PEXPIRE', lock) and c('HEXISTS', lock) and c('HKEYS', lock)
end)
if denied then
  return denied
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-2}
end
local wait = redis.call('PTTL', lock)
if wait == -2 then
  redis.call('HSET', lock, owner, 1)
  redis.call('PEXPIRE', lock, lease)
  return {1}
end
if redis.call('HEXISTS', lock, owner) == 1 then
  redis.call('PEXPIRE', lock, lease)
  return {1}
end
local holder = ''
for _, field in ipairs(redis.call('HKEYS', lock)) do
  if lock_owner(field) then -- (a Mutex's hash records its token too, see LOCK_TOKEN)
    holder = field
    break
  end
end
return {0, wait, holder}
