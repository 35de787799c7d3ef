-- sem_renew: extend the leases of many permits in one call (the watchdog's batch).
--
-- KEYS[3i-2]  permits zset of lease i
-- KEYS[3i-1]  counts hash of lease i (same semaphore)
-- KEYS[3i]    state hash of lease i (same semaphore)
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   permit id of lease i
--
-- Returns an array with one entry per lease: 1 when the permit was still held
-- and its lease was extended, 0 when it is gone or already expired (unchanged).
-- The new lease is a whole millisecond: a claim's grant renewed is one no
-- more (see lease_score in publish_lib.lua).
-- The expiries of the lease's keys follow (see sem_lib.lua): the permits zset
-- and counts hash outlive their last lease (pexp), and a state hash that
-- expires at all outlives them by the idle bound (sexp); both are raised with
-- the same slack as there, SEM_SLACK_MS and SEM_IDLE_MS of sem_lib.lua.
local IDLE_MS, SLACK_MS = 1000, 1000
-- A refused command fails the batch before it changes anything, naming the
-- command (see lock_denied in publish_lib.lua, prepended at build time;
-- Redis < 7 cannot tell).
local denied = lock_denied(function(c)
  local ok = c('TIME')
  for i = 1, #KEYS / 3 do
    local p, h, s = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
    ok = ok and c('ZSCORE', p) and c('ZADD', p) and c('ZRANGE', p) and
      c('PEXPIREAT', p) and c('PEXPIREAT', h) and c('HMGET', s) and c('HSET', s) and
      c('PEXPIREAT', s)
  end
  return ok
end)
if denied then
  return denied
end
local now = now_ms()
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 3 do
  local permits, counts, state, id = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  local expiry = redis.call('ZSCORE', permits, id)
  if expiry and tonumber(expiry) > now then
    local at = now + lease
    redis.call('ZADD', permits, 'XX', at, id)
    local v = redis.call('HMGET', state, 'pexp', 'sexp', 'auto', 'limit')
    local pexp, sexp = tonumber(v[1]), tonumber(v[2])
    if not pexp or pexp <= at then
      local target = at + 1 + SLACK_MS
      if not pexp then
        -- Unknown: never cut a longer lease short.
        local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')[2]
        target = math.max(target, lease_end(last) + 1)
      end
      pexp = target
      redis.call('PEXPIREAT', permits, pexp)
      redis.call('PEXPIREAT', counts, pexp)
      if v[4] then
        redis.call('HSET', state, 'pexp', pexp)
      end
    end
    -- A state hash that expires (auto limit) must outlive the permits.
    if v[4] and v[3] and (not sexp or sexp < pexp + IDLE_MS) then
      sexp = pexp + IDLE_MS + SLACK_MS
      redis.call('HSET', state, 'sexp', sexp)
      redis.call('PEXPIREAT', state, sexp)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
