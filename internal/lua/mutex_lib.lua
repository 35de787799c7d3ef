-- mutex_lib: the Mutex's hand-off; put in its scripts after publish_lib.lua,
-- queue_lib.lua and fence_lib.lua at build time (each script carries the
-- helpers it can call; in acquire.lua and release.lua, those of their
-- contended paths at their '--@contended' line: see lua.go and shake.go),
-- so it declares functions only and touches no key.
--
-- A lock that becomes free while waiters are queued (see queue_lib.lua) is
-- never left free: it is handed to the head waiter in the same script
-- (direct hand-off), which learns it from the message '@' .. owner .. ' ' ..
-- proof, proving the fields first, last and left, and holds the lock without
-- a further round trip. first..last is a block of fencing tokens reserved for
-- the new holder: it takes the first and may give the rest to goroutines of
-- its own process it passes the lock to (cohorting); any later acquisition
-- gets a higher token. left says whether waiters are still queued behind it:
-- their number, counted up to QUEUE_CHASE.
-- The waiter takes only a grant whose tokens are above the fencing counter
-- its last check saw (fence_seen), so a grant it let lapse is never taken
-- again.

-- Whether, by c, this user may run what the Mutex scripts run to hand the
-- lock hash on, on the queue q and on the fencing counter: with the
-- commands each script runs on the lock hash, its check before its first
-- write (see lock_denied). serving: the caller only serves the queue (see
-- queue_may).
local function mutex_may(c, lock, q, fence, serving)
  return c('HSET', lock) and c('PEXPIRE', lock) and c('PEXPIREAT', lock) and
    c('DEL', lock) and queue_may(c, q, serving) and fence_may(c, fence)
end

-- The Mutex's grant (see queue_serve): the head waiter holds the lock from
-- now on, for its claim window, with a new block of k.block fencing tokens
-- (the hash records the first, and the claim: see lock_hold). behind: the
-- entries queue_head found behind the head; the grant says how many (at
-- most QUEUE_CHASE), which tells the new holder whether anyone waits after
-- it, without counting the queue.
local function mutex_grant(k, _, arrival, owner, lease, ttl, secret, _, behind)
  k.last = fence_tokens(k.fence, k.block, lease, k.floor)
  local first = k.last - k.block + 1
  lock_hold(k.lock, owner, first, ttl, lease, #behind > 0, k.block > 1 and k.last or nil)
  return queue_proof(secret, arrival, first, k.last, #behind)
end

-- One grant is heard, and the lock is the head's; one no one heard is undone
-- (the tokens stay spent, so tokens still rise) and the next waiter served.
local function mutex_settle(k, heard, _, ttl)
  if heard then
    k.ttl = ttl
    return false
  end
  k.last = 0
  redis.call('DEL', k.lock)
  return true
end

-- Hands a free lock (its hash must not exist) to the head waiter: it holds
-- the lock from now on, for its claim window (see queue_lib.lua), with a new
-- block of block fencing tokens, and is told so on its grant channel (grants:
-- the prefix). A head whose Client receives nothing is dropped (it lost its
-- place; a live one queues again when it re-checks) and the next one is
-- served (see queue_serve). With no one queued, message (if any) is
-- published on channel for local listeners instead. When the caller's own
-- entry self is at the head, nothing is done and -1 is returned: the caller
-- takes the lock itself. pre, if given, is the head the caller just looked up
-- ({head, arrival, behind}, see queue_head); floor, the last token of the
-- hold that just ended, when the counter may not record it (see
-- fence_lib.lua): the grant's tokens start above it.
-- Returns the time the lock is granted for in milliseconds (its PTTL; 0 when
-- no one waits, or -1) and the last fencing token reserved (0 when none was),
-- and, when the head waiter's grant channel may not be published on (an ACL),
-- the refusal: the lock is then left free and the head queued.
local function mutex_handoff(lock, fence, q, publish, channel, grants, message, self, block, pre, floor)
  local k = {grants = grants, lock = lock, fence = fence, block = block, floor = floor, q = q, ttl = 0, last = 0,
    grant = mutex_grant, settle = mutex_settle}
  local served, refusal = queue_serve(q, self, publish, k, pre)
  if served then
    return -1, 0
  elseif served == nil and message and lock_may_publish(publish, channel) then
    lock_publish(publish, channel, message)
  end
  return k.ttl, k.last, refusal
end
