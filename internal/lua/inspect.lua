-- inspect: read a Mutex as it stands, for rlock's Mutex.Inspect. Read-only:
-- it changes nothing, not even lapsed waiters (the next lock script drops
-- those), so it reports them as they are.
--
-- KEYS[1]  lock hash (see acquire.lua)
-- KEYS[2]  fencing counter
-- KEYS[3]  queue zset (see queue_lib.lua, prepended with publish_lib.lua)
-- KEYS[4]  waiter deadlines zset
-- ARGV[1]  the most waiters to report, from the head
--
-- Returns an array (numbers as decimal strings; they may pass 2^31):
--   {now, pttl, fence, queued, holders, waiters}
--   now      the server clock in microseconds
--   pttl     the lock hash's PTTL in ms (-2: no holder, -1: no expiry)
--   fence    the fencing counter ('' when missing)
--   queued   the number of entries in the queue
--   holders  {owner, count, ...}: the hash's fields
--   waiters  {owner, arrival, deadline, lease, '', ...} from the head: the
--            entry's owner and lease (its secret is not returned), its
--            arrival number and deadline ('' when it has none); the fifth
--            item, '' here, is the mode or permits in rw_inspect.lua and
--            sem_inspect.lua
now_ms()
local holders = redis.call('HGETALL', KEYS[1])
local waiters = queue_waiters({queue = KEYS[3], waiters = KEYS[4]}, tonumber(ARGV[1]))
return {string.format('%d', clock_us), tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[2]) or '',
  tostring(redis.call('ZCARD', KEYS[3])), holders, waiters}
