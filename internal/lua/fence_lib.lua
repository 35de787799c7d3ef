-- fence_lib: the fencing counter of a lock (one plain integer key per lock),
-- shared by the Mutex and RWMutex scripts; prepended after publish_lib.lua
-- (whose clock it reads) at build time (see lua.go). It declares functions
-- only and touches no key.
--
-- Tokens rise strictly per lock name although the counter does not live for
-- ever. A reservation of a block of tokens starts above both the counter and
-- the server clock in microseconds: a missing counter (a new lock, one idle
-- long enough for its counter to expire, or a Redis that restarted without
-- persistence) starts from that clock, and so, at no extra cost, does every
-- reservation that finds the clock ahead of the counter (an uncontended
-- lock's). The counter runs ahead of the clock only while blocks are reserved
-- faster than their size in microseconds (a contended acquisition reserves a
-- block of 65), and by no more than the blocks reserved since it last fell
-- behind. Each reservation therefore sets the counter to expire at the later
-- of now and the time its value stands for (value / 1000 ms), plus the hold's
-- lease (FENCE_KEEP_MS at least): a counter ahead of the clock lives until
-- the clock has passed it, and one still needed by a holder (readers share
-- the last writer's token) is kept past its lease (fence_keep). Redis deletes
-- a key only once its clock passed the expiry, so a counter created afresh,
-- from a clock at least the keep time past the old counter's value (less the
-- moments between the expiry check and this script's TIME), starts above
-- every token of the one before. The expiry is absolute (PXAT, PEXPIREAT),
-- read by replicas and the AOF as written: after a failover the new primary
-- deletes the counter by its own clock and restarts it from that same clock,
-- which is safe while that clock does not lag the old primary's by more than
-- the keep time. Nothing here survives a server clock stepped back by more
-- than that, or writes lost by asynchronous replication (see WithReplicaAck).
-- Tokens stay below 2^53, exact as Lua numbers, until about the year 2250.
--
-- An uncontended Mutex hold of a lease of FENCE_KEEP_MS or more does not
-- write the counter (acquire.lua's first part: its uncontended take): its
-- hash records its tokens instead (LOCK_TOKEN, LOCK_LAST), so that a lock
-- held on a name not used for a while is one key in Redis, not two. The
-- counter is written when the hold ends: a release, ForceUnlock or
-- abandon.lua gives it the hold's last token (fence_free) unless a hand-off
-- reserves tokens above that at once (fence_tokens' floor); a hold that
-- expires instead did so its lease (1s at least: shorter ones write the
-- counter) after its tokens were reserved, a block at most 65us ahead of the
-- clock, so a counter made afresh from the clock starts above them as above.
--
-- Hence, while such a hold lives the counter (or, when it is missing, the
-- clock) may stand below tokens of the hold's block: fence_seen may return
-- a value below them. That is harmless where it is used, since no grant
-- message carries those tokens (the holder passes them in its own process)
-- and every later reservation starts above them (the floor).

-- The shortest time (ms) the counter is kept past its last token or holder:
-- the margin for a failover to a replica whose clock lags (rw_renew.lua
-- repeats it).
local FENCE_KEEP_MS = 1000

-- Whether, by c, this user may run what this library runs on fence (see
-- lock_denied), TIME aside (every caller checks it) and fence_keep's PTTL
-- (only its callers check it).
local function fence_may(c, fence)
  return c('GET', fence) and c('SET', fence, '1', 'PXAT', '1', 'GET') and c('PEXPIREAT', fence)
end

-- When a counter whose value is last must expire at the earliest (see
-- above), the server clock reading now ms (0: the time last stands for, which
-- a release uses without reading the clock); keep is the lease of the hold.
local function fence_expiry(last, keep, now)
  return string.format('%d', math.max(now, math.ceil(last / 1000)) + math.max(tonumber(keep) or 0, FENCE_KEEP_MS))
end

-- Reserves a block of tokens and returns the last one. keep is the lease (ms)
-- of the hold that takes them; floor, if given, the last token of a hold
-- that ends here and whose tokens the counter may not record (see above).
-- One SET when the clock is ahead of the counter and the floor
-- (it reads the counter as it writes), two when it is not.
local function fence_tokens(fence, block, keep, floor)
  now_ms() -- the clock is read before any write, and once per script
  local base = math.max(clock_us, floor or 0)
  local last = base + block
  local before = tonumber(redis.call('SET', fence, string.format('%d', last), 'PXAT', fence_expiry(last, keep, clock_ms), 'GET'))
  if before and before > base then
    last = before + block
    redis.call('SET', fence, string.format('%d', last), 'PXAT', fence_expiry(last, keep, clock_ms))
  end
  return last
end

-- Gives the counter the last token of a hold that ends with no tokens
-- reserved after it (see above), to expire keep ms past the time last
-- stands for (FENCE_KEEP_MS at least; a release does not read the clock).
-- While such a hold lives nothing else writes the counter, so it is not
-- above last; should it be, it is put back. last nil (a hash that records no
-- token: a quorum vote's, an older version's): nothing to do. One SET.
local function fence_free(fence, last, keep)
  if not last then
    return
  end
  local before = tonumber(redis.call('SET', fence, string.format('%d', last), 'PXAT', fence_expiry(last, keep, 0), 'GET'))
  if before and before > last then
    redis.call('SET', fence, string.format('%d', before), 'PXAT', fence_expiry(before, keep, 0))
  end
end

-- Whether, by c, this user may run what fence_lease runs for a lease of
-- lease ms (see lock_denied).
local function fence_lease_may(c, fence, lease)
  return tonumber(lease) >= FENCE_KEEP_MS or c('GET', fence) and c('SET', fence, '1', 'PXAT', '1', 'GET')
end

-- For a hold whose lease is set to lease ms, last being its last token as
-- its hash records it: a lease below FENCE_KEEP_MS could end the hold sooner
-- than the keep time after tokens the counter may not record (see above),
-- so they are given to the counter now (fence_free).
local function fence_lease(fence, last, lease)
  if tonumber(lease) < FENCE_KEEP_MS then
    fence_free(fence, last, lease)
  end
end

-- The counter now (the last token issued), or a fresh token when it is
-- missing (expired, evicted, or deleted by hand): a token handed out must
-- never be lower than one before. keep as for fence_tokens.
local function fence_now(fence, keep)
  local cur = tonumber(redis.call('GET', fence) or '0')
  if cur > 0 then
    return cur
  end
  return fence_tokens(fence, 1, keep)
end

-- A value no token issued so far is above, and every token issued from now on
-- is: the counter, or when it is missing the server clock in microseconds (a
-- counter that expired stood below it). A grant whose tokens are not above it
-- was made before this call.
local function fence_seen(fence)
  local cur = redis.call('GET', fence)
  if cur then
    return tonumber(cur)
  end
  now_ms()
  return clock_us
end

-- Keeps the holds that share the counter's last token (an RWMutex's readers
-- zset and counts hash, each left so when it does not exist) past at, the
-- end of a lease among them, and the counter FENCE_KEEP_MS past it. Only ever
-- later: the counter's expiry stays past the time its value stands for. A
-- counter with no expiry was not set by this library and is left so.
local function fence_keep(fence, now, at, readers, counts)
  for _, key in ipairs({readers, counts}) do
    local pttl = redis.call('PTTL', key)
    if pttl ~= -2 and (pttl < 0 or now + pttl < at) then
      redis.call('PEXPIREAT', key, at + 1)
    end
  end
  local pttl = redis.call('PTTL', fence)
  if pttl >= 0 and now + pttl < at + FENCE_KEEP_MS then
    redis.call('PEXPIREAT', fence, at + FENCE_KEEP_MS)
  end
end
