-- queue_inspect_lib: how the inspection scripts read a wait queue (see
-- queue_lib.lua, prepended before it at build time, see lua.go) and the
-- leases of a lock's holders. Read-only.

-- The first max waiters of q from the head, for an inspection: {owner,
-- arrival, deadline ('' when it has none), lease, ask, ...}, ask without the
-- limit a semaphore waiter insists on (its secret is not returned).
local function queue_waiters(q, max)
  local out = {}
  local scored = redis.call('ZRANGE', q.queue, 0, max - 1, 'WITHSCORES')
  for i = 1, #scored, 2 do
    local owner, lease, _, _, ask = queue_parse(scored[i])
    if owner then
      out[#out + 1] = owner
      out[#out + 1] = string.format('%d', tonumber(scored[i + 1]))
      out[#out + 1] = redis.call('ZSCORE', q.waiters, scored[i]) or ''
      out[#out + 1] = string.format('%d', lease)
      out[#out + 1] = string.match(ask, '^[^=]*')
    end
  end
  return out
end

-- The first max holders of a lock that gives each its own lease, for an
-- inspection: {id, expiry (server time, ms), count, claim, ...}, from the
-- zset of leases (id -> expiry, see lease_score) and the hash of counts (id
-- -> count: read holds, permits; an id without one holds one, see sem_lib.lua);
-- claim is '1' when the hold is a claim not yet extended (lease_claimed),
-- else '0'.
local function inspect_leases(leases, counts, max)
  local out = {}
  local scored = redis.call('ZRANGE', leases, 0, max - 1, 'WITHSCORES')
  for i = 1, #scored, 2 do
    out[#out + 1] = scored[i]
    out[#out + 1] = string.format('%d', lease_end(scored[i + 1]))
    -- (A semaphore's counts key may be someone else's when no lease of
    -- more than one permit is held: see sem_counts_usable.)
    local count = redis.pcall('HGET', counts, scored[i])
    out[#out + 1] = type(count) == 'string' and count or '1'
    out[#out + 1] = lease_claimed(scored[i + 1]) and '1' or '0'
  end
  return out
end
