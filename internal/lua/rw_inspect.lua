-- rw_inspect: read an RWMutex as it stands, for rlock's RWMutex.Inspect.
-- Read-only: it changes nothing, not even lapsed readers or waiters (the next
-- lock script drops those), so it reports them as they are.
--
-- KEYS[1]  writer hash (see rw_lib.lua)
-- KEYS[2]  readers zset
-- KEYS[3]  reader counts hash
-- KEYS[4]  queue zset
-- KEYS[5]  waiter deadlines zset
-- KEYS[6]  fencing counter
-- ARGV[1]  the most readers, and the most waiters, to report
--
-- Returns an array (numbers as decimal strings):
--   {now, pttl, fence, queued, writer, readers, waiters, nreaders, claim}
--   now      the server clock in microseconds
--   pttl     the writer hash's PTTL in ms (-2: no writer, -1: no expiry)
--   fence    the fencing counter ('' when missing)
--   queued   the number of entries in the queue
--   writer   the writer hash's owner and token fields: {owner, count, 't',
--            token}
--   readers  {owner, expiry (server time, ms), count, claim, ...}: claim
--            '1' when the reader's hold is a claim not yet extended (see
--            lease_score), else '0'
--   waiters  {owner, arrival, deadline, lease, mode, ...} from the head: as
--            in inspect.lua, mode 'r' or 'w' (the secret is not returned)
--   nreaders the number of readers in the readers zset
--   claim    '1' when the writer's hold is a claim not yet extended (see
--            LOCK_CLAIM), else '0'
now_ms()
local max = tonumber(ARGV[1])
local writer, claim = {}, nil
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f = fields[i]
  if f == LOCK_CLAIM then
    claim = fields[i + 1]
  elseif f == LOCK_TOKEN or lock_owner(f) then
    writer[#writer + 1] = f
    writer[#writer + 1] = fields[i + 1]
  end
end
local readers = inspect_leases(KEYS[2], KEYS[3], max)
local waiters = queue_waiters({queue = KEYS[4], waiters = KEYS[5]}, max)
return {string.format('%d', clock_us), tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[6]) or '',
  tostring(redis.call('ZCARD', KEYS[4])), writer, readers, waiters,
  tostring(redis.call('ZCARD', KEYS[2])), lock_claimed(KEYS[1], claim) and '1' or '0'}
