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
--   holders  {permit id, lease expiry (server time, ms), permits, claim,
--            ...}: claim '1' when the permits are a claim not yet extended
--            (see lease_score), else '0'
--   waiters  {permit id, arrival, deadline, lease, permits asked, ...} from
--            the head, as in inspect.lua (the secret is not returned)
--   nholders the number of permit ids in the permits zset
now_ms()
local max = tonumber(ARGV[1])
local holders = inspect_leases(KEYS[2], KEYS[3], max)
local waiters = queue_waiters({queue = KEYS[4], waiters = KEYS[5]}, max)
local state = redis.call('HMGET', KEYS[1], 'limit', 'used')
return {string.format('%d', clock_us), state[1] or '', state[2] or '0', tostring(redis.call('ZCARD', KEYS[4])), holders, waiters,
  tostring(redis.call('ZCARD', KEYS[2]))}
