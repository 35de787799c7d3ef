-- sem_release: give back the permits of one lease and hand them on to the
-- waiters at the head of the queue in the same step (see sem_lib.lua).
-- Idempotent per request id: a retry of a release whose reply was lost returns
-- the first outcome.
--
-- The holder of a one-permit lease may name a successor, as release.lua's
-- holder does: a goroutine of its own process that waits for the permit, or
-- a place reserved for its process's next Acquire (ARGV[8]). When others are
-- queued, the successor is queued at the tail before the permit is handed to
-- the head, so that the process gets its next turn after them; when no one
-- else is, the lease is kept for the holder's permit id, its lease re-set,
-- so that the holder passes it on locally (see core.Turns), or, for a
-- reserved place, released with the place not queued.
--
-- KEYS[1..5]  the semaphore keys (see sem_lib.lua)
-- KEYS[6]     result latch of this request
-- ARGV[1]     permit id
-- ARGV[2]     publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[3]     grant channel prefix: a waiter's channel is it .. its client id
-- ARGV[4]     latch lifetime in milliseconds
-- ARGV[5]     "1" when an earlier attempt of this request may have run (a
--             retry): its latch is looked up first; "0" for a first attempt
-- ARGV[6]     the successor's queue entry (see sem_lib.lua), or '' for none
-- ARGV[7]     the longest the successor waits before re-checking (ms, see
--             sem_acquire.lua's ARGV[4]); sooner when the permit is granted
--             for less
-- ARGV[8]     "1" when the successor is a place reserved for the holder's
--             process (its next Acquire is expected, no goroutine waits
--             yet): queued only behind other waiters, never kept for
-- ARGV[9]     the lease (ms) re-set when the permit is kept (with ARGV[6])
--
-- Returns its numbers (one string of them, see lock_reply; a lone number as
-- is), written here as arrays:
--   {n}         released n permits (and handed them on); no successor named
--   {-1}        the id holds none (never acquired, or already released)
--   {-2}        its lease had already expired (the permits went back to the
--               pool then); no successor was queued
--   {n, arrival, granted}  released n permits, handed on; the successor was
--               queued behind the other waiters at the place arrival (a grant
--               to it names it); granted: the ms until the earliest permit
--               this release handed on lapses, 0 when it handed on none
--   {-3}        kept: a successor was named and no one else is queued; the
--               id keeps its permits, with its lease re-set
--   {-4}        released; the reserved successor (ARGV[8]) was not queued,
--               as no one else was
--   a NOPERM error naming a command the user may not run (PUBLISH on the
--               grant channel of the waiter queued first included): nothing
--               was changed (or, when permits went to other waiters first,
--               the permits were released and no more handed on, and the
--               successor may be queued)
local id, successor = ARGV[1], ARGV[6]
-- Reads come first, unchecked (lock_call). A release that names no successor
-- and finds no one queued and its own lease still running (the common case)
-- checks what it may run from its first write on; any other the commands of
-- every path.
if ARGV[5] == '1' then
  local done = lock_call('GET', KEYS[6])
  if done then
    return done
  end
end
local expiry = lock_call('ZSCORE', KEYS[2], id)
if not expiry then
  return -1
end
local now = now_ms()
sem_load()
local easy = successor == '' and not st.queued and tonumber(expiry) > now
local denied = lock_denied(function(c)
  if easy then
    return sem_release_may(c) and c('SET', KEYS[6])
  end
  return sem_may(c) and c('SET', KEYS[6])
end)
if denied then
  return denied
end

local function done(s, horizon)
  sem_save(now, horizon)
  redis.call('SET', KEYS[6], s, 'PX', ARGV[4])
  return s
end

if easy then
  -- No one queued, no successor, a live lease: what the general path below
  -- does in this case, before the queue's helpers are made.
  local n, counted = sem_count(id)
  st.used = math.max(st.used - n, 0)
  sem_drop(id, counted)
  return done(string.format('%d', n))
end
-- Below, the other paths: the queue's helpers, which only they call, are
-- made at the next line (see contended in lua.go), by calls that get there.
--@contended
if tonumber(expiry) <= now then
  sem_reclaim(now)
  sem_handoff(now, ARGV[2], ARGV[3], nil, false)
  sem_save(now)
  return -2
end

local unqueued = false
if successor ~= '' and not (st.queued and queue_head(semq)) then
  if ARGV[8] == '1' then
    successor, unqueued = '', true
  elseif sem_keeps(successor) then
    local at = now + tonumber(ARGV[9])
    redis.call('ZADD', KEYS[2], 'XX', at, id)
    sem_keep_permits(at, false)
    return done('-3')
  end
  -- Else the limit changed under the turn: the successor queues, and is
  -- served (or told it never can be) as anyone else is.
end

local n, counted = sem_count(id)
st.used = math.max(st.used - n, 0)
-- Our permit leaves the zset only after the hand-off, so that a grant does not
-- re-create it (and its expiry) when ours was the last.
st.pinned = true
local used = st.used
local arrival, horizon
if successor ~= '' then
  -- Queued before the hand-off, so that it is served in the same step when
  -- every waiter ahead of it turns out to be gone.
  arrival, horizon = sem_enqueue(successor, tonumber(ARGV[7]), 'fresh')
end
-- (As the caller's own entry: the waiters served are told of their claims
-- alone, as the successor learns when to re-check from the reply.)
local mine
mine, denied = sem_handoff(now, ARGV[2], ARGV[3], arrival and successor, false)
if mine then
  -- Every waiter ahead of the successor was gone: it is served as any head.
  denied = select(2, sem_handoff(now, ARGV[2], ARGV[3], nil, false))
end
if denied and st.used == used then
  -- The permits cannot go to the head, who could not be told of them:
  -- refused before anything changed, rather than freed with no one told.
  if arrival then
    queue_dequeue(semq, successor)
  end
  return denied
end
st.pinned = false
sem_drop(id, counted)
if denied then
  sem_save(now, horizon)
  return denied -- released, the rest not handed on: final, not retried
end
if unqueued then
  return done('-4')
end
if not arrival then
  return done(string.format('%d', n))
end
-- The successor re-checks when the first grant of this release lapses (at
-- once when none was made), as the reply tells its Client.
local granted = 0
if st.first then
  granted = math.max(st.first - now, 0)
end
local _, lease = queue_parse(successor)
redis.call('ZADD', semq.waiters, 'XX', now + math.min(granted, tonumber(ARGV[7])) + queue_grace(lease or 0), successor)
return done(string.format('%d %d %d', n, arrival, granted), horizon)
