-- quorum_acquire: one master's vote for a quorum lock (rlock.Quorum, the
-- Redlock algorithm): take the lock hash for owner when it is free. A quorum
-- lock has no queue and no fencing counter on its masters: waiters wait on the
-- unlock channel of each master and retry, and a token from one master of
-- several would prove nothing (see rlock/quorum.go). The hash has the Mutex's
-- shape (owner field -> 1), so release.lua, renew.lua and abandon.lua serve it
-- unchanged; its queue keys stay empty, so a release announces the lock on
-- the unlock channel.
--
-- Gated asks (see rlock/quorum_gate.go) also keep the place in line of the
-- longest-waiting caller that lost at this master, the gate: a free lock goes
-- to that caller before anyone else, so that a holder that releases and asks
-- again does not pass the waiters it just woke. The place is one key, the
-- reservation, "arrival callid", which expires: a caller that vanishes loses
-- it by its planned re-check plus the claim window, and once someone else
-- finds the lock free the reserved caller has the claim window left to take it.
-- The first to find it so wakes the reserved caller (a message addressed to
-- its id on the unlock channel; the reservation then reads "arrival callid
-- w"): the release woke one waiter per process, which need not be that one.
--
-- KEYS[1]  lock hash
-- KEYS[2]  tombstone of this owner field, written by abandon.lua
-- KEYS[3]  the gate's reservation (read and written only by gated asks)
-- ARGV[1]  owner field (the same on every master for one acquisition)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the caller's id, the same for every round of one Lock call; '' for
--          an ask that is not a gate's (the reservation is left alone)
-- ARGV[4]  the caller's arrival (server ms) from an earlier reply, or ''
-- ARGV[5]  how long (ms) the caller waits between asks when the holder's key
--          has no expiry
-- ARGV[6]  the claim window (ms)
-- ARGV[7]  gated asks: publish command, PUBLISH, SPUBLISH or PUBLISH? (see
--          publish_lib.lua)
-- ARGV[8]  gated asks: the unlock channel
--
-- Returns an array:
--   {1}                  acquired, or already this owner's (an attempt whose
--                        reply was lost): the lease is (re)set
--   {0, wait, holder}    held by another owner: wait is its remaining lease in
--                        milliseconds (-1 when the key has no expiry), holder
--                        its owner field ('' if unknown), so that the caller
--                        can tell one holder of a majority from a split vote;
--                        gated asks get the caller's arrival fourth
--   {3, wait, arrival}   gated asks only: free, but kept for a caller that has
--                        waited longer, for at most wait ms
--   {-2}                 this owner field was abandoned: never reuse it
--   a NOPERM error       the user may not run a command this call may run
--                        (named in the error): nothing changed
local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]
local gate, caller, arrival = KEYS[3], ARGV[3], ARGV[4]
local denied = lock_denied(function(c)
  return c('EXISTS', KEYS[2]) and c('PTTL', lock) and c('HSET', lock) and
    c('PEXPIRE', lock) and c('HEXISTS', lock) and c('HKEYS', lock) and
    (caller == '' or c('TIME') and c('GET', gate) and c('SET', gate) and
      c('DEL', gate) and c('PTTL', gate) and c('PEXPIRE', gate) and
      c(lock_publish_name(ARGV[7]), ARGV[8], 'm'))
end)
if denied then
  return denied
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-2}
end

-- The reservation as {arrival, caller, woken}, or nil; woken: the line was
-- woken for the free lock.
local function reserved()
  local r = redis.call('GET', gate)
  if not r then
    return nil
  end
  local at, id, woken = string.match(r, '^(%d+) (%S+)( ?w?)$')
  if not at then
    return nil -- not a reservation: ignored, and overwritten by the next loss
  end
  return {tonumber(at), id, woken == ' w'}
end

local wait = redis.call('PTTL', lock)
if wait == -2 then
  local r = caller ~= '' and reserved()
  if r and r[2] == caller then
    redis.call('DEL', gate)
  elseif r and (arrival == '' or tonumber(arrival) >= r[1]) then
    local left = redis.call('PTTL', gate)
    local claim = tonumber(ARGV[6])
    if left == -1 or left > claim then
      left = claim
    end
    -- (A place in its last millisecond, PTTL 0, has lapsed: the lock is
    -- the caller's.)
    if left > 0 then
      if not r[3] then
        redis.call('SET', gate, r[1] .. ' ' .. r[2] .. ' w', 'PX', left)
        lock_publish(ARGV[7], ARGV[8], '@' .. r[2]) -- (mux.AddressPrefix)
      elseif left == claim then
        redis.call('PEXPIRE', gate, claim)
      end
      if arrival == '' then
        arrival = string.format('%d', now_ms())
      end
      return {3, left, arrival}
    end
  end
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
if caller == '' then
  return {0, wait, holder}
end
if arrival == '' then
  arrival = string.format('%d', now_ms())
end
local r = reserved()
if not r or r[2] == caller or r[1] > tonumber(arrival) then
  local keep = (wait >= 0 and wait or tonumber(ARGV[5])) + tonumber(ARGV[6])
  redis.call('SET', gate, arrival .. ' ' .. caller, 'PX', keep)
end
return {0, wait, holder, arrival}
