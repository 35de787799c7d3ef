-- publish_lib: how every lock script announces a release or a grant, how it
-- checks the Redis user's rights before its first write, and the server clock;
-- prepended to every script that changes a lock at build time (see lua.go).
-- It declares functions only and touches no key.
--
-- lock_publish(cmd, channel, message) publishes message on channel and
-- returns how many subscribers received it. cmd is what the Client passed:
--   'PUBLISH'   classic pub/sub on one Redis (standalone, Sentinel): the
--               count is every subscriber of the channel;
--   'SPUBLISH'  sharded pub/sub in a cluster: the count is the subscribers of
--               the shard, which is where every waiter of the lock listens;
--   'PUBLISH?'  classic pub/sub in a cluster: Redis counts only the node that
--               runs the script, though the message reaches every node over
--               the cluster bus, so the count says nothing about a waiter
--               subscribed elsewhere. It is published with PUBLISH and
--               reported as 1 (someone may listen): a script must never take a
--               waiter for gone on that count, and hand its grant to the next.
local function lock_publish(cmd, channel, message)
  if cmd == 'PUBLISH?' then
    redis.call('PUBLISH', channel, message)
    return 1
  end
  return redis.call(cmd, channel, message)
end

-- The command name of a publish command as passed by the Client.
local function lock_publish_name(cmd)
  if cmd == 'PUBLISH?' then
    return 'PUBLISH'
  end
  return cmd
end

-- The error of a script refused cmd on key ('' for none); done says what the
-- script did before it stopped.
local function lock_refusal(cmd, key, done)
  local on = ''
  if key ~= '' then
    on = ' on ' .. key
  end
  return redis.error_reply('NOPERM the Redis user may not run ' .. cmd .. on .. ', which the lock scripts need; ' .. done)
end

-- A script's reply of several numbers, as one string of them separated by
-- spaces, which the Client reads as it reads an array (lua.Ints): Redis turns
-- a table into a reply at several times the cost (it looks up the field of
-- each special reply type in it). A reply of one number is returned as is.
-- (%d: a number concatenated as is may print as 1.7e+15.)
local function lock_reply(...)
  return string.format(string.rep(' %d', select('#', ...)), ...):sub(2)
end

-- Before its first write, a script asks Redis whether this user may run
-- every command it may run after that, on its keys and channels
-- (redis.acl_check_cmd: no command is run), so that a refusal changes
-- nothing instead of leaving a lock held by a caller told it failed, or a key
-- without its expiry: Redis checks each command a script runs, and stops the
-- script at the refused one. A read before the first write changes nothing
-- when refused, and is not checked ahead: run by lock_call, it names its
-- refusal after the fact (a check costs a script
-- about what a command does; an uncontended Lock and Unlock made 17). Redis
-- < 7 cannot tell: no check there. Set by script_begin, as a function library
-- cannot read it until a call.
local lock_acl, lock_begun
local lock_refused_cmd, lock_refused_key = nil, nil

-- Whether the user may run cmd on key (nil for none) with the arguments
-- given, shaped as the scripts send them; when not, it is recorded for
-- lock_refusal.
local function lock_may(cmd, key, ...)
  local ok
  if not lock_begun then
    error('relock: a lock script did not call script_begin')
  elseif not lock_acl then
    ok = true
  elseif key == nil then
    ok = lock_acl(cmd)
  else
    ok = lock_acl(cmd, key, ...)
  end
  if not ok then
    lock_refused_cmd, lock_refused_key = cmd, key or ''
  end
  return ok
end

-- lock_denied(check) returns nil when check(c) holds, else the error reply
-- naming the command refused. check chains calls c(cmd, key, args...) with
-- 'and'; c is redis.acl_check_cmd itself, so that the check costs the
-- scripts little on every call, and lock_may only when it fails, to name
-- the command. A command is checked with its key alone (each argument costs
-- the check a string; 28 checks take half the time so): what a key spec
-- grants (read, write) is fixed by the command for every command the scripts
-- run but SET, which reads with GET, so a SET ... GET is checked with GET.
local function lock_denied(check)
  if not lock_acl or check(lock_acl) then
    return nil
  end
  check(lock_may)
  return lock_refusal(lock_refused_cmd, lock_refused_key, 'nothing was changed')
end

-- Runs cmd as redis.call does, for a command that no write of the script
-- precedes (or that no check could have refused, see lock_denied): refused
-- by an ACL, it stops the script with the refusal named as lock_denied names
-- it, nothing having changed. Any other error stops the script as is.
local function lock_call(cmd, ...)
  local reply = redis.pcall(cmd, ...)
  if type(reply) == 'table' and reply.err then
    if lock_acl and not lock_acl(cmd, ...) then
      error(lock_refusal(cmd, (...) or '', 'nothing was changed'))
    end
    error(reply)
  end
  return reply
end

-- Whether this Redis user may publish on channel (see lock_denied).
local function lock_may_publish(cmd, channel)
  return lock_may(lock_publish_name(cmd), channel, 'm')
end

-- The server time in milliseconds, read once per script call; clock_us is the
-- same reading in microseconds (below 2^53, exact as a Lua number).
local clock_ms, clock_us
local function now_ms()
  if not clock_ms then
    local t = lock_call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    clock_ms = math.floor(clock_us / 1000)
  end
  return clock_ms
end

-- script_begin starts every call of a script (lua.go puts it first). Run as
-- a Redis function (see functions.go), the library, and with it the state
-- above, outlives the call: what one call found (the clock, a refusal) must
-- not reach the next. A library with state of its own adds a function to
-- script_begins that sets it up for the call.
local script_begins = {}
local function script_begin()
  lock_acl, lock_begun = redis.acl_check_cmd, true
  lock_refused_cmd, lock_refused_key = nil, nil
  clock_ms, clock_us = nil, nil
  for i = 1, #script_begins do
    script_begins[i]()
  end
end

-- A Mutex-shaped lock hash (a Mutex's, an RWMutex's writer hash) maps its
-- holder's owner field (client id ':' number) to its hold count, beside two
-- fields no owner field is spelt like (see lock_owner), written in the same
-- HSET as the owner field wherever a holder is made (lock_hold):
--   LOCK_TOKEN  the fencing token Redis granted that holder: the first of the
--               block it reserved (the holder may pass later tokens of the
--               block on to goroutines of its own process without Redis)
--   LOCK_CLAIM  only for a grant made for a claim window shorter than the
--               lease (see queue_lib.lua's Claims): the end of that claim
--               (server time, ms), which the hash was set to expire at
--               exactly; any lease set since (an extension, a renewal, a
--               re-entry) moved the expiry past it, so the hold is a claim
--               not yet extended while the two are equal (see lock_claimed)
--   LOCK_LAST   the last token of the holder's block, when it is more than
--               one token: the fencing counter may not record it (see
--               fence_lib.lua)
--   LOCK_QUEUED only in a Mutex's hash: someone may be queued for the lock,
--               written by a waiter as it queues and by a hand-off that leaves
--               others queued; the holder's final release looks at the queue
--               only when it is there, so that an uncontended Unlock reads
--               one hash field and no queue. One left after its waiter went
--               costs that release a look at an empty queue.
-- All go with the hash when the holder releases (the hash is deleted).
local LOCK_TOKEN, LOCK_CLAIM, LOCK_QUEUED, LOCK_LAST = 't', 'c', 'q', 'l'

-- The last token a Mutex-shaped hold may have handed out, given the hash's
-- LOCK_TOKEN and LOCK_LAST fields as read (nil: neither is recorded).
local function lock_last(token, last)
  token, last = tonumber(token), tonumber(last)
  if token and last then
    return math.max(token, last)
  end
  return token or last
end

-- Whether a field of a lock hash is an owner field.
local function lock_owner(field)
  return string.find(field, ':', 1, true) ~= nil
end

-- Makes owner the holder of the Mutex-shaped lock hash lock (count 1, see
-- LOCK_TOKEN) with token, for ttl ms of its lease of lease ms: one HSET and
-- one expiry. A grant for a claim window (ttl < lease) expires at a time the
-- hash records (LOCK_CLAIM). The caller's ACL check covers HSET, PEXPIRE and
-- PEXPIREAT on lock. queued: others wait (see LOCK_QUEUED). last, when given,
-- is recorded as LOCK_LAST.
local function lock_hold(lock, owner, token, ttl, lease, queued, last)
  ttl, token = tonumber(ttl), string.format('%d', token)
  local fields = {owner, 1, LOCK_TOKEN, token}
  if queued then
    fields[#fields + 1], fields[#fields + 2] = LOCK_QUEUED, 1
  end
  if last then
    fields[#fields + 1], fields[#fields + 2] = LOCK_LAST, string.format('%d', last)
  end
  if ttl < tonumber(lease) then
    local at = string.format('%d', now_ms() + ttl)
    fields[#fields + 1], fields[#fields + 2] = LOCK_CLAIM, at
    redis.call('HSET', lock, unpack(fields))
    redis.call('PEXPIREAT', lock, at)
  else
    redis.call('HSET', lock, unpack(fields))
    redis.call('PEXPIRE', lock, ttl)
  end
end

-- Whether the hold of lock, whose LOCK_CLAIM field reads at (nil: none), is
-- still the claim its grant made: the hash expires when the claim ends.
local function lock_claimed(lock, at)
  return at ~= nil and string.format('%d', redis.call('PEXPIRETIME', lock)) == at
end

-- The holders of an RWMutex's read lock and of a semaphore's permits each
-- have a lease of their own, kept in a zset: holder -> the end of its lease
-- (server time, ms). A grant made for a claim window shorter than the lease
-- (see queue_lib.lua's Claims) is scored half a millisecond before the
-- claim's end; every other write of a lease (a grant of the whole lease, an
-- extension, a renewal, a re-entry) a whole millisecond. So the hold is a
-- claim not yet extended while its score has that half (lease_claimed), which
-- the grant's own ZADD records at no cost: no further field to write or
-- clear, and any lease set since overwrites it. Compared with the clock,
-- which reads whole milliseconds, the score orders exactly as the claim's end
-- would (score <= now just when the end is), so purges and renewals see the
-- same lease; what computes with it (a wait, a key's expiry) takes lease_end.

-- The score of a lease ending at at (whole ms); claimed for a claim's grant.
local function lease_score(at, claimed)
  if claimed then
    return string.format('%.1f', at - 0.5)
  end
  return at
end

-- The end (whole ms) of a lease scored score (a number or a reply string).
local function lease_end(score)
  return math.ceil(tonumber(score))
end

-- Whether a lease scored score is a claim not yet extended.
local function lease_claimed(score)
  return tonumber(score) % 1 ~= 0
end

-- Leaves the tombstone of an owner field for ms milliseconds ('0': none), so
-- that a late acquisition attempt of that field is refused.
local function lock_bury(tombstone, ms)
  if ms ~= '0' then
    redis.call('SET', tombstone, 1, 'PX', ms)
  end
end
