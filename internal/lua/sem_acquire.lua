-- sem_acquire: take n permits as one lease, in strict arrival order, or join
-- the queue (one script for both: a waiter subscribed to its grant channel
-- first, so that a release can hand it the permits; see sem_lib.lua).
-- Idempotent per permit id: a retry of a request whose reply was lost, or the
-- re-check of a waiter that was handed permits, reports the permits the id
-- holds (and sets their lease afresh), and a queued id keeps its arrival number.
--
-- KEYS[1..5]  the semaphore keys (see sem_lib.lua)
-- KEYS[6]     tombstone of this permit id, written by sem_abandon.lua
-- ARGV[1]     permit id (client id ':' number; also the waiter id while it waits)
-- ARGV[2]     permits wanted, a positive integer, or "all" for every free permit
-- ARGV[3]     lease in milliseconds
-- ARGV[4]     the longest a queued waiter waits before re-checking (ms; it
--             re-checks sooner when the earliest held permit expires sooner):
--             its place lapses queue_grace later (see queue_lib.lua)
-- ARGV[5]     publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[6]     grant channel prefix: a waiter's channel is it .. its client id
-- ARGV[7]     "1" to join (or stay in) the queue when the permits are not free
--             now, "0" for a one-off attempt that leaves no trace
-- ARGV[8]     limit to establish when none is set (a non-negative integer),
--             marked auto so that the state expires when idle; "" for none
-- ARGV[9]     "1" when the limit must equal ARGV[8] (a Lock), else "0"
-- ARGV[10]    the waiter's secret (hex), part of its queue entry
-- ARGV[11]    "1" when no request for this permit id was sent before: it can
--             hold nothing, so that is not looked up. (The tombstone always
--             is: an abandon may overtake a first request whose reply was lost.)
-- ARGV[12]    the waiter's claim window in milliseconds, part of its queue
--             entry (see sem_lib.lua)
--
-- Returns its numbers (one string of them, see lock_reply; a lone number as
-- is), written here as arrays:
--   {1, n}      acquired n permits now
--   {1, n, 1}   the id already held n permits (an earlier request took them
--               and its reply was lost, or they were handed to it while it
--               waited); their lease was set again, from now
--   {0, wait, arrival}  not acquired (and queued if ARGV[7] is "1"); wait
--               is the milliseconds until the earliest held permit expires,
--               -1 when none is held; arrival is the number of the waiter's
--               place in the queue (0 when not queued): a grant to it names
--               it (see sem_lib.lua)
--   {-2}        this permit id was abandoned
--   {-3, limit} more permits asked for than the limit (nothing queued)
--   {-4}        no limit has been set
--   {-5, limit} the limit differs from ARGV[8] and ARGV[9] is "1" (nothing queued)
local id, want, lease, recheck = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local publish, prefix = ARGV[5], ARGV[6]
local fresh = ARGV[11] == '1'
-- Reads come first, unchecked (lock_call). A first request that finds no one
-- queued, no lease to reclaim and its permits free, or not to wait for (the
-- common case), checks what it may run from its first write on; any other
-- the commands of every path.
if lock_call('EXISTS', KEYS[6]) == 1 then
  return -2
end
local now = now_ms()
sem_load()
sem_establish(ARGV[8])
local first, reclaims = sem_first_lease(now)
local function plain()
  if not fresh or st.queued or reclaims or not st.limit or
    (ARGV[9] == '1' and st.limit ~= tonumber(ARGV[8])) then
    return false
  end
  local avail = st.limit - st.used
  local n = want == 'all' and avail or tonumber(want)
  return n <= st.limit and (n > 0 and avail >= n or ARGV[7] ~= '1' or want == 'all')
end
local easy = plain()
local denied = lock_denied(function(c)
  if easy then
    return sem_take_may(c, want)
  end
  return sem_may(c)
end)
if denied then
  return denied
end
if want ~= '1' and not sem_counts_usable() then
  return sem_counts_refusal()
end
sem_reclaim(now, first)
if easy then
  -- What the general path below does in this case, before the queue's
  -- helpers are made: no one to serve first, no place to keep.
  local avail = sem_available()
  local n = want == 'all' and avail or tonumber(want)
  if n > 0 and avail >= n then
    sem_take(id, n, now + lease)
    sem_save(now)
    return lock_reply(1, n)
  end
  sem_save(now)
  return lock_reply(0, sem_wait(now), 0)
end
-- Below, the other paths: the queue's helpers, which only they call, are
-- made at the next line (see contended in lua.go), by calls that get there.
--@contended

local entry
if want ~= 'all' then
  local ask = want
  if ARGV[9] == '1' then
    ask = want .. '=' .. ARGV[8]
  end
  entry = queue_entry(id, ARGV[3], ARGV[12], ARGV[10], ask)
end

local function finish(reply, horizon)
  sem_save(now, horizon)
  return reply
end

-- Leaves the queue for good (the request fails), letting the next in line on.
local function leave()
  if entry and not fresh then
    queue_dequeue(semq, entry)
  end
  sem_handoff(now, publish, prefix, nil, true)
end

if not fresh then
  -- An id that holds is not queued: the hand-off or the take dequeued it.
  if redis.call('ZSCORE', KEYS[2], id) then
    local at = now + lease
    redis.call('ZADD', KEYS[2], 'XX', at, id)
    sem_keep_permits(at, false)
    return finish(lock_reply(1, sem_count(id), 1))
  end
end

if not st.limit then
  leave()
  return finish(-4)
end
if ARGV[9] == '1' and st.limit ~= tonumber(ARGV[8]) then
  leave()
  return finish(lock_reply(-5, st.limit))
end
local n = tonumber(want)
if want ~= 'all' and n > st.limit then
  leave()
  return finish(lock_reply(-3, st.limit))
end

-- Permits free now go to those queued first (a lease ran out, or a hand-off
-- reached a Client that was gone); then to us, if nobody else waits.
local mine
mine, denied = sem_handoff(now, publish, prefix, (not fresh) and entry or nil, false)
if denied then
  return finish(denied)
end
local avail = sem_available()
if want == 'all' then
  n = avail
end
if n > 0 and avail >= n and mine ~= false then
  if mine then
    queue_dequeue(semq, entry)
  end
  sem_take(id, n, now + lease)
  if mine then
    -- Permits may remain for the next in line.
    sem_handoff(now, publish, prefix, nil, false)
  end
  return finish(lock_reply(1, n))
end

local wait = sem_wait(now)
if want == 'all' or ARGV[7] ~= '1' then
  return finish(lock_reply(0, wait, 0))
end

-- A waiter already queued keeps its arrival number.
if wait >= 0 then
  recheck = math.min(wait, recheck)
end
local arrival, last = sem_enqueue(entry, recheck, fresh and 'fresh' or nil)
return finish(lock_reply(0, wait, arrival), last)
