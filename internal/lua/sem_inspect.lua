-- sem_inspect: read a semaphore as it stands, for Semaphore.Inspect.
-- Read-only: it changes nothing, not even leases that ran out or lapsed
-- waiters (the next semaphore script reclaims those), so it reports them as
-- they are.
--
-- KEYS[1]  state hash (see sem_lib.lua)
-- KEYS[2]  permits zset
-- KEYS[3]  counts hash
-- KEYS[4]  queue zset
-- KEYS[5]  waiter deadlines zset
-- ARGV[1]  the most holders, and the most waiters, to report
--
-- Returns an array (numbers as decimal strings):
--   {now, limit, used, queued, holders, waiters, nholders}
--   now      the server clock in microseconds
--   limit    the limit ('' when none is set)
--   used     the permits counted as held ('0' when unset)
--   queued   the number of entries in the queue
--   holders  {permit id, lease expiry (server time, ms), permits, ...}
--   waiters  {permit id, arrival, deadline, lease, permits asked, ...} from
--            the head, as in inspect.lua (the secret is not returned)
--   nholders the number of permit ids in the permits zset
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max = tonumber(ARGV[1]) - 1
local holders = {}
local scored = redis.call('ZRANGE', KEYS[2], 0, max, 'WITHSCORES')
for i = 1, #scored, 2 do
  holders[#holders + 1] = scored[i]
  holders[#holders + 1] = scored[i + 1]
  holders[#holders + 1] = redis.call('HGET', KEYS[3], scored[i]) or '0'
end
local waiters = {}
local queue = redis.call('ZRANGE', KEYS[4], 0, max, 'WITHSCORES')
for i = 1, #queue, 2 do
  local id, n, lease = string.match(queue[i], '^([^/]+)/(%d+)/(%d+)/%d+/%d*/%x+$')
  if id then
    waiters[#waiters + 1] = id
    waiters[#waiters + 1] = string.format('%d', tonumber(queue[i + 1]))
    waiters[#waiters + 1] = redis.call('ZSCORE', KEYS[5], queue[i]) or ''
    waiters[#waiters + 1] = lease
    waiters[#waiters + 1] = n
  end
end
local state = redis.call('HMGET', KEYS[1], 'limit', 'used')
return {string.format('%d', now), state[1] or '', state[2] or '0', tostring(redis.call('ZCARD', KEYS[4])), holders, waiters,
  tostring(redis.call('ZCARD', KEYS[2]))}
