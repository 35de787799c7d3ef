-- sem_lib: helpers shared by the semaphore scripts; prepended to each of them at
-- build time (see lua.go), so it declares functions only and touches no key.
--
-- Every semaphore script receives the same first six KEYS:
--   KEYS[1] state hash: limit, used (permits held), seq (arrival counter), and
--           auto (present when the limit was established by a script from the
--           limit a Semaphore was configured with, rather than set by
--           TrySetLimit or SetLimit)
--   KEYS[2] permits zset: permit id -> lease expiry (server time, ms)
--   KEYS[3] counts hash: permit id -> permits it holds
--   KEYS[4] queue zset: waiter id -> arrival number (FIFO order)
--   KEYS[5] waiter deadlines zset: waiter id -> expiry (server time, ms)
--   KEYS[6] wants hash: waiter id -> permits it asks for
--
-- Expiry: every script that writes ends with sem_expire, so that each key
-- expires by itself once what it holds has run out: the permits zset and the
-- counts hash when the last lease ends, the queue, deadlines and wants when
-- the last waiter deadline passes, and the state hash SEM_IDLE_MS after both,
-- unless its limit was set by TrySetLimit or SetLimit (no auto field): then it
-- is permanent, as that limit could not be re-established.

-- How long the state hash of a semaphore with an auto limit outlives its last
-- lease and waiter deadline (sem_renew.lua repeats the value).
local SEM_IDLE_MS = 1000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The highest score of a zset, or nil when it is empty.
local function sem_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  return last and tonumber(last)
end

-- Gives n permits back to the pool; never creates the state hash.
local function sem_unuse(n)
  if n ~= 0 and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'used', -n)
  end
end

-- Returns permits whose lease ended to the pool, and forgets waiters that
-- stopped refreshing their place; bounded per call so no script runs long.
local function sem_reclaim(now)
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- The permits zset expired as a whole, when its last lease ended: nothing
    -- is held, whatever the counter says.
    local used = redis.call('HGET', KEYS[1], 'used')
    if used and used ~= '0' then
      redis.call('HSET', KEYS[1], 'used', 0)
    end
    redis.call('DEL', KEYS[3])
  end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(expired) do
    sem_unuse(tonumber(redis.call('HGET', KEYS[3], id) or '0'))
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

-- Establishes limit (a decimal string) if no limit is set, marking it auto:
-- the state hash then expires when the semaphore is idle. "" does nothing.
local function sem_establish(limit)
  if limit ~= '' and redis.call('HEXISTS', KEYS[1], 'limit') == 0 then
    redis.call('HSET', KEYS[1], 'limit', limit, 'auto', 1)
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

-- Sets every key's expiry from what it holds (see the top of this file).
local function sem_expire(now)
  local held = sem_last(KEYS[2])
  if held then
    local at = math.max(held, now) + 1
    redis.call('PEXPIREAT', KEYS[2], at)
    redis.call('PEXPIREAT', KEYS[3], at)
  else
    redis.call('DEL', KEYS[3])
  end
  local waiting = sem_last(KEYS[5])
  if waiting then
    local at = math.max(waiting, now) + 1
    redis.call('PEXPIREAT', KEYS[4], at)
    redis.call('PEXPIREAT', KEYS[5], at)
    redis.call('PEXPIREAT', KEYS[6], at)
  else
    -- Every queued waiter has a deadline: without deadlines, nobody waits.
    redis.call('DEL', KEYS[4], KEYS[6])
  end
  if redis.call('HEXISTS', KEYS[1], 'limit') == 0 or redis.call('HEXISTS', KEYS[1], 'auto') == 1 then
    redis.call('PEXPIREAT', KEYS[1], math.max(held or 0, waiting or 0, now) + SEM_IDLE_MS)
  end
end
