-- mutex_lib: helpers shared by the Mutex scripts; prepended to each of them at
-- build time (see lua.go), so it declares functions only and touches no key.
--
-- The waiter queue of a lock, used by every script that includes this file:
--   queue zset:     owner field -> arrival number (FIFO order)
--   waiters zset:   owner field -> deadline (server time, ms); a waiter that
--                   stops re-checking loses its place when it passes
--   seq key:        arrival counter

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Forgets waiters whose deadline passed (their process stopped re-checking).
local function mutex_purge(queue, waiters, now)
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(gone) do
    redis.call('ZREM', queue, id)
    redis.call('ZREM', waiters, id)
  end
end

local function mutex_dequeue(queue, waiters, id)
  redis.call('ZREM', queue, id)
  redis.call('ZREM', waiters, id)
end

-- Announces that the lock is free: to the waiter at the head of the queue by
-- name (the lock is reserved for it), or, with no queue, to anyone listening.
local function mutex_announce(queue, publish, channel, message)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    redis.call(publish, channel, '@' .. head)
  else
    redis.call(publish, channel, message)
  end
end
