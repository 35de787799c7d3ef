-- sem_renew: extend the leases of many permits in one call (the watchdog's batch).
--
-- KEYS[3i-2]  permits zset of lease i
-- KEYS[3i-1]  counts hash of lease i (same semaphore)
-- KEYS[3i]    state hash of lease i (same semaphore)
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   permit id of lease i
--
-- Returns an array with one entry per lease: 1 when the permit was still held
-- and its lease was extended, 0 when it is gone or already expired (unchanged),
-- -1 when reading the lease met an error (its permits zset or state hash is of
-- the wrong type: someone else's key, or one written in its place): nothing of
-- that lease is changed, and the other leases of the batch are renewed all the
-- same.
-- The new lease is a whole millisecond: a claim's grant renewed is one no
-- more (see lease_score in publish_lib.lua).
-- The expiries of the lease's keys follow (see sem_lib.lua): the permits zset,
-- and the counts hash while the state's m says it may hold a count, outlive
-- their last lease (pexp), and a state hash that
-- expires at all outlives them by the idle bound (sexp); both are raised with
-- the same slack as there, SEM_SLACK_MS and SEM_IDLE_MS of sem_lib.lua.
-- A lease is changed only once every key it reads was read without error.
-- Its first write is a PEXPIREAT: over maxmemory (noeviction) Redis refuses a
-- ZADD or HSET as a script's first write, but runs a PEXPIREAT and every
-- write after it, so renewals go on while Redis refuses new data, as the
-- Mutex's do (renew.lua).
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
-- Whether the reply r of a redis.pcall is an error.
local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end
local renewed = {}
for i = 1, #KEYS / 3 do
  local permits, counts, state, id = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i + 1]
  -- Reads first, each allowed to fail: a key of the wrong type fails its
  -- lease alone, before anything of it is changed, and no write below can
  -- fail on a key read here.
  local expiry = redis.pcall('ZSCORE', permits, id)
  local live = not failed(expiry) and expiry and tonumber(expiry) > now
  local v = live and redis.pcall('HMGET', state, 'pexp', 'sexp', 'auto', 'limit', 'm', 'used')
  if failed(expiry) or failed(v) then
    renewed[i] = -1
  elseif live then
    local at = now + lease
    -- The zset outlives the lease it is given (no later expiry is cut):
    -- the first write, so that Redis over maxmemory lets the ZADD run.
    redis.call('PEXPIREAT', permits, at + 1, 'GT')
    redis.call('ZADD', permits, 'XX', at, id)
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
      -- The counts hash follows only while it may hold a count (see
      -- sem_count in sem_lib.lua): else the key may be someone else's.
      if v[5] == '1' or (not v[5] and tonumber(v[6] or '0') > 0) then
        redis.call('PEXPIREAT', counts, pexp)
      end
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
