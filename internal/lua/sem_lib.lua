-- sem_lib: helpers shared by the semaphore scripts; prepended to each of them at
-- build time (see lua.go), so it declares functions only and touches no key.
--
-- Every semaphore script receives the same first six KEYS:
--   KEYS[1] state hash: limit, used (permits held), seq (arrival counter)
--   KEYS[2] permits zset: permit id -> lease expiry (server time, ms)
--   KEYS[3] counts hash: permit id -> permits it holds
--   KEYS[4] queue zset: waiter id -> arrival number (FIFO order)
--   KEYS[5] waiter deadlines zset: waiter id -> expiry (server time, ms)
--   KEYS[6] wants hash: waiter id -> permits it asks for

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Returns permits whose lease ended to the pool, and forgets waiters that
-- stopped refreshing their place; bounded per call so no script runs long.
local function sem_reclaim(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(expired) do
    local n = tonumber(redis.call('HGET', KEYS[3], id) or '0')
    redis.call('HINCRBY', KEYS[1], 'used', -n)
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[2], id)
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(gone) do
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
  end
end

local function sem_available()
  local limit = redis.call('HGET', KEYS[1], 'limit')
  if not limit then
    return nil
  end
  return tonumber(limit) - tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
end

local function sem_dequeue(id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
end

-- Wakes the waiter at the head of the queue, by id, if what it asks for is
-- free now, or if it can never be served (no limit, or it wants more than the
-- limit) so that it fails at once: exactly one process acts on a release, and
-- no herd forms.
local function sem_wake_head(publish, channel)
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if not head then
    return
  end
  local limit = redis.call('HGET', KEYS[1], 'limit')
  local avail = sem_available()
  local want = tonumber(redis.call('HGET', KEYS[6], head) or '1')
  if not limit or avail >= want or want > tonumber(limit) then
    redis.call(publish, channel, '@' .. head)
  end
end
