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
--   {now, pttl, fence, queued, holders, waiters, token, claim}
--   now      the server clock in microseconds
--   pttl     the lock hash's PTTL in ms (-2: no holder, -1: no expiry)
--   fence    the highest token reserved: the fencing counter, or the last
--            token of the holder's block when that is higher (the counter
--            does not record it, see fence_lib.lua); '' for neither
--   queued   the number of entries in the queue
--   holders  {owner, count, ...}: the hash's owner fields
--   waiters  {owner, arrival, deadline, lease, '', ...} from the head: the
--            entry's owner and lease (its secret is not returned), its
--            arrival number and deadline ('' when it has none); the fifth
--            item, '' here, is the mode or permits in rw_inspect.lua and
--            sem_inspect.lua
--   token    the token Redis granted the holder ('' when not recorded: no
--            holder, or a hash written by an older version); see LOCK_TOKEN
--   claim    '1' when the hold is a claim not yet extended, else '0'
now_ms()
local holders, token, claim, tokens_end = {}, '', nil, nil
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f = fields[i]
  if f == LOCK_TOKEN then
    token = fields[i + 1]
  elseif f == LOCK_CLAIM then
    claim = fields[i + 1]
  elseif f == LOCK_LAST then
    tokens_end = fields[i + 1]
  elseif lock_owner(f) then
    holders[#holders + 1] = f
    holders[#holders + 1] = fields[i + 1]
  end
end
local waiters = queue_waiters({queue = KEYS[3], waiters = KEYS[4]}, tonumber(ARGV[1]))
local fence = redis.call('GET', KEYS[2])
local last = lock_last(token, tokens_end)
if last and (not fence or last > tonumber(fence)) then
  fence = string.format('%d', last)
end
return {string.format('%d', clock_us), tostring(redis.call('PTTL', KEYS[1])), fence or '',
  tostring(redis.call('ZCARD', KEYS[3])), holders, waiters, token, lock_claimed(KEYS[1], claim) and '1' or '0'}
