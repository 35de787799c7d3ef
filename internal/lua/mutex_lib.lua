-- mutex_lib: helpers shared by the Mutex scripts; prepended to each of them at
-- build time (see lua.go), so it declares functions only and touches no key.
--
-- The waiter queue of a lock, used by every script that includes this file:
--   queue zset:     entry -> arrival number (FIFO order): the server clock
--                   in microseconds when the entry first queued, or one past
--                   the number before when that is later (see mutex_arrival)
--   waiters zset:   entry -> deadline (server time, ms): the time by which the
--                   waiter said it re-checks at the latest, plus
--                   mutex_grace; a waiter that stops re-checking loses
--                   its place when it passes
--   seq key:        arrival counter
-- An entry is owner field .. '/' .. lease .. '/' .. claim .. '/' .. secret:
-- the lease (ms) the waiter asked for, its claim window (ms): how long the
-- lock is granted for when it is handed to that waiter (see mutex_handoff),
-- and a random hex secret known only to the waiter and to whoever may read
-- the queue key.
--
-- A lock that becomes free while waiters are queued is never left free: it is
-- handed to the head waiter in the same script (direct hand-off), which learns
-- it from the message '@' .. owner .. ' ' .. first .. ':' .. last .. ':' ..
-- left .. ':' .. mac and holds the lock without a further round trip; left is
-- the number of waiters still queued behind it. The message goes to the
-- waiter's Client alone, on its grant channel (grant prefix .. client id, the
-- owner field up to its last ':'), so a hand-off costs one delivery however
-- many processes wait; and when no one receives it, the waiter's Client is
-- gone (its connection closed): the grant is undone and the next waiter served. mac is
-- sha1hex(secret .. ':' .. first .. ':' .. last .. ':' .. left): anyone may publish on the
-- channel, but only Redis (or a reader of the queue) can grant the lock, and
-- neither the tokens nor the count can be altered. first..last is a block of fencing tokens
-- reserved for the new holder (INCRBY): it takes the first and may give the
-- rest to goroutines of its own process it passes the lock to (cohorting);
-- any later acquisition gets a higher token.

-- The server time in milliseconds, read once per script call; clock_us is the
-- same reading in microseconds (below 2^53, exact as a Lua number).
local clock_ms, clock_us
local function now_ms()
  if not clock_ms then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    clock_ms = math.floor(clock_us / 1000)
  end
  return clock_ms
end

-- The shortest time (ms) the fencing counter is kept past its last token: the
-- margin for a failover to a replica whose clock lags (see mutex_tokens).
local MUTEX_FENCE_KEEP_MS = 1000

-- How many waiters behind a claimed hand-off are told when the claim lapses
-- (see mutex_handoff).
local MUTEX_CHASE = 2

-- Reserves a block of fencing tokens and returns the last one. keep is the
-- lease (ms) of the hold that takes them.
--
-- Tokens rise strictly although the counter does not live for ever. A missing
-- counter (a new lock, one idle long enough for its counter to expire, or a
-- Redis that restarted without persistence) starts from the server clock in
-- microseconds. The counter runs ahead of that clock only while tokens are
-- reserved faster than one per microsecond over its life (a contended
-- acquisition reserves a block of 65): by the tokens reserved since it was
-- created less the microseconds elapsed since, usually a negative number.
-- Each reservation therefore sets the counter to expire at the later of now
-- and the time its value stands for (value / 1000 ms), plus the hold's lease
-- (MUTEX_FENCE_KEEP_MS at least): a counter ahead of the clock lives until the
-- clock has passed it. Redis deletes a key only once its clock passed the
-- expiry, so a counter created afresh, from a clock at least the keep time
-- past the old counter's value (less the moments between the expiry check and
-- this script's TIME), starts above every token of the one before. The
-- expiry is absolute (PEXPIREAT), read by replicas and the AOF as written:
-- after a failover the new primary deletes the counter by its own clock and
-- restarts it from that same clock, which is safe while that clock does not
-- lag the old primary's by more than the keep time. Nothing here survives a
-- server clock stepped back by more than that, or writes lost by
-- asynchronous replication (see WithReplicaAck). Tokens stay below 2^53,
-- exact as Lua numbers, until about the year 2250.
local function mutex_tokens(fence, block, keep)
  now_ms() -- the clock is read before any write, and once per script
  local last = redis.call('INCRBY', fence, block)
  if last == block then
    -- INCRBY made the counter from nothing (no counter starts from 0): it
    -- restarts from the clock in the same script, before anyone reads it.
    last = clock_us + block
    redis.call('SET', fence, string.format('%d', last))
  end
  local at = math.max(clock_ms, math.ceil(last / 1000)) + math.max(tonumber(keep) or 0, MUTEX_FENCE_KEEP_MS)
  redis.call('PEXPIREAT', fence, string.format('%d', at))
  return last
end

-- The fencing counter now, or a fresh token when it is missing (expired,
-- evicted, or deleted by hand): a token handed out must never be lower than
-- one before. keep as for mutex_tokens.
local function mutex_fence_now(fence, keep)
  local cur = redis.call('GET', fence)
  if cur then
    return tonumber(cur)
  end
  return mutex_tokens(fence, 1, keep)
end

-- A value no token issued so far is above, and every token issued from now on
-- is: the fencing counter, or when it is missing the server clock in
-- microseconds (a counter that expired stood below it, see mutex_tokens). A
-- hand-off message whose tokens are not above it was sent before this call.
local function mutex_fence_seen(fence)
  local cur = redis.call('GET', fence)
  if cur then
    return tonumber(cur)
  end
  now_ms()
  return clock_us
end

-- Whether, by c, this user may run what the Mutex scripts may run on the
-- fencing counter, the queue and the waiters zsets, and TIME: with the
-- commands each script runs on the lock hash, its check before its first
-- write (see lock_denied).
local function mutex_may(c, fence, queue, waiters)
  return c('TIME') and
    c('GET', fence) and c('INCRBY', fence, '1') and c('SET', fence, '1', 'PX', '1') and
    c('PEXPIREAT', fence, '1') and
    c('ZRANGE', queue, '0', '0') and c('ZCARD', queue) and c('ZADD', queue, '1', 'm') and
    c('ZREM', queue, 'm') and c('PEXPIREAT', queue, '1') and
    c('ZRANGE', waiters, '0', '0') and c('ZRANGEBYSCORE', waiters, '0', '0') and
    c('ZSCORE', waiters, 'm') and c('ZADD', waiters, '1', 'm') and c('ZREM', waiters, 'm') and
    c('PEXPIREAT', waiters, '1')
end

-- Whether, by c, this user may hand the free lock on (mutex_handoff), on the
-- lock hash: with mutex_may.
local function mutex_may_grant(c, lock)
  return c('HSET', lock, 'f', '1') and c('PEXPIRE', lock, '1') and c('DEL', lock)
end

-- Whether, by c, this user may queue a waiter (mutex_enqueue), on the arrival
-- counter: with mutex_may.
local function mutex_may_seq(c, seq)
  return c('INCR', seq) and c('PEXPIREAT', seq, '1')
end

-- Leaves the tombstone of an owner field for ms milliseconds ('0': none), so
-- that a late acquire.lua of that field is refused.
local function mutex_bury(tombstone, ms)
  if ms ~= '0' then
    redis.call('SET', tombstone, 1, 'PX', ms)
  end
end

local function mutex_entry(owner, lease, claim, secret)
  return owner .. '/' .. lease .. '/' .. claim .. '/' .. secret
end

-- How long past its planned re-check a waiter keeps its place (ms): the lease
-- in its entry (the watchdog timeout for most), at least 2s so that a busy
-- process re-checking late keeps it; as the re-check comes within 4/5 of a
-- watchdog timeout, a place lapses within two of them (4s when that is
-- shorter) of the waiter's last check. The waiters zset stores both at once
-- (see the top of this file); the entry gives the grace back to read the
-- planned re-check.
local function mutex_grace(entry)
  return math.max(tonumber(string.match(entry, '^.+/(%d+)/%d+/%x+$') or '0'), 2000)
end

-- Forgets waiters whose deadline passed (their process stopped re-checking).
local function mutex_purge(queue, waiters, now)
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(gone) do
    redis.call('ZREM', queue, id)
    redis.call('ZREM', waiters, id)
  end
end

local function mutex_dequeue(queue, waiters, entry)
  redis.call('ZREM', queue, entry)
  redis.call('ZREM', waiters, entry)
end

-- A new arrival number: the server clock in microseconds, or one past the
-- number before when that is later (places taken faster than one per
-- microsecond, or a clock stepped back). Numbers rise strictly, and an
-- inspection reads the time a place was taken from its number (see
-- inspect.lua).
-- (SET .. GET: one command per place, as INCR would be; the caller sets the
-- counter's expiry again.)
local function mutex_arrival(seq)
  now_ms()
  local before = tonumber(redis.call('SET', seq, string.format('%d', clock_us), 'GET') or '0')
  if before and before >= clock_us then
    local n = before + 1
    redis.call('SET', seq, string.format('%d', n))
    return n
  end
  return clock_us
end

-- Joins the queue (or stays in it); recheck is the most milliseconds from now
-- after which the waiter re-checks (see the waiters zset).
-- The queue, deadlines and arrival counter expire together just after the
-- latest deadline, by which every place in them has lapsed: a queue whose
-- waiters all vanished leaves nothing behind. (Deadlines are only ever
-- brought forward after this, never pushed back.)
local function mutex_enqueue(queue, waiters, seq, entry, recheck)
  redis.call('ZADD', queue, 'NX', mutex_arrival(seq), entry)
  redis.call('ZADD', waiters, now_ms() + recheck + mutex_grace(entry), entry)
  local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')[2]
  for _, key in ipairs({queue, waiters, seq}) do
    redis.call('PEXPIREAT', key, string.format('%d', tonumber(last) + 1))
  end
end

-- Returns the entry at the head of the queue, after forgetting lapsed
-- waiters, or nil when no one waits. Costs one command when no one waits.
local function mutex_head(queue, waiters)
  local first = redis.call('ZRANGE', waiters, 0, 0, 'WITHSCORES')
  if not first[1] then
    return nil
  end
  local now = now_ms()
  if tonumber(first[2]) <= now then
    mutex_purge(queue, waiters, now)
  end
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- The grant channel of the Client of an owner field (see Client.NewID).
local function mutex_grant_channel(grants, owner)
  return grants .. (string.match(owner, '^(.+):[^:]*$') or owner)
end

-- Hands a free lock (its hash must not exist) to the head waiter: it holds the
-- lock from now on, with a new fencing token, and is told so on its grant
-- channel. A head whose Client receives nothing is dropped (it lost its
-- place; a live one queues again when it re-checks) and the next one is
-- served. With no one queued, message (if any) is published on channel for
-- local listeners instead. When the caller's own entry self is at the head,
-- nothing is done and -1 is returned: the caller takes the lock itself. block
-- is the number of fencing tokens reserved for the new holder; head, if given,
-- is the head entry the caller just looked up.
--
-- The lock is granted for the head's claim window, not its whole lease, when
-- that is shorter: a Client that receives the grant extends it to the lease
-- (with its next renewal, batched), and one that is paused or stuck with its
-- connection open (PUBLISH counts it as a receiver) holds the queue up for
-- the claim window only. The MUTEX_CHASE waiters queued next are then told
-- '@' .. owner .. ' ~' .. ms, so that they re-check when the claim lapses
-- instead of when the lease they last saw would have; only those that planned
-- to re-check later than that (queued behind a long lease), so that a
-- hand-off costs one message where waiters queue behind claimed hand-offs
-- (workers taking turns). Telling the second one too makes two hung waiters
-- in a row cost two claim windows, not a re-check interval: when the first
-- claim lapses, the second one's re-check hands the lock to the next hung
-- waiter, and its reply tells it when that claim lapses in turn.
-- Returns the time the lock is granted for in milliseconds (its PTTL; 0 when
-- no one waits, or -1) and the last fencing token reserved (0 when none was),
-- and, when the head waiter's grant channel may not be published on (an ACL),
-- the refusal: the lock is then left free and the head queued. Other messages
-- that may not be published are left out (listeners re-check in time anyway).
local function mutex_handoff(lock, fence, queue, waiters, publish, channel, grants, message, self, block, head)
  while true do
    head = head or mutex_head(queue, waiters)
    if not head then
      if message and lock_may_publish(publish, channel) then
        lock_publish(publish, channel, message)
      end
      return 0, 0
    end
    if head == self then
      return -1, 0
    end
    local owner, lease, claim, secret = string.match(head, '^(.+)/(%d+)/(%d+)/(%x+)$')
    if owner and not lock_may_publish(publish, mutex_grant_channel(grants, owner)) then
      -- A grant no one could be told of is not made: the head stays
      -- queued and takes the lock when it re-checks.
      return 0, 0, lock_refusal(lock_publish_name(publish), mutex_grant_channel(grants, owner),
        'the lock was not handed to the waiter queued first, who could not be told of it')
    end
    mutex_dequeue(queue, waiters, head)
    if owner and tonumber(lease) > 0 and tonumber(claim) > 0 then
      local ttl = math.min(tonumber(lease), tonumber(claim))
      redis.call('HSET', lock, owner, 1)
      redis.call('PEXPIRE', lock, ttl)
      local last = mutex_tokens(fence, block, lease)
      local left = redis.call('ZCARD', queue)
      -- %d: concatenating a number would print 16 digits as 1.7e+15.
      local grant = string.format('%d:%d:%d', last - block + 1, last, left)
      local heard = lock_publish(publish, mutex_grant_channel(grants, owner), '@' .. owner .. ' ' .. grant .. ':' .. redis.sha1hex(secret .. ':' .. grant))
      if heard > 0 then
        if ttl < tonumber(lease) and left > 0 then
          local now = now_ms()
          -- (ZSCORE each rather than ZMSCORE: no command the ACL rules in
          -- the README do not grant.)
          for _, entry in ipairs(redis.call('ZRANGE', queue, 0, MUTEX_CHASE - 1)) do
            local nxt = string.match(entry, '^(.+)/%d+/%d+/%x+$')
            local by = now + ttl + mutex_grace(entry)
            if nxt and tonumber(redis.call('ZSCORE', waiters, entry) or by + 1) > by and
                lock_may_publish(publish, mutex_grant_channel(grants, nxt)) then
              lock_publish(publish, mutex_grant_channel(grants, nxt), string.format('@%s ~%d', nxt, ttl))
              redis.call('ZADD', waiters, 'XX', by, entry)
            end
          end
        end
        return ttl, last
      end
      -- No one heard it: undone (the tokens stay spent, so tokens still rise).
      redis.call('DEL', lock)
    end
    -- A malformed entry (not written by this version), or a waiter whose
    -- Client is gone: dropped, next one.
    head = nil
  end
end
