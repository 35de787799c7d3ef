-- sem_release: give back the permits of one lease and hand them on to the
-- waiters at the head of the queue in the same step (see sem_lib.lua).
-- Idempotent per request id: a retry of a release whose reply was lost returns
-- the first outcome.
--
-- KEYS[1..5]  the semaphore keys (see sem_lib.lua)
-- KEYS[6]     result latch of this request
-- ARGV[1]     permit id
-- ARGV[2]     publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[3]     grant channel prefix: a waiter's channel is it .. its client id
-- ARGV[4]     latch lifetime in milliseconds
-- ARGV[5]     "1" when an earlier attempt of this request may have run (a
--             retry): its latch is looked up first; "0" for a first attempt
--
-- Returns the permits released, -1 when the id holds none (never acquired or
-- already released), -2 when its lease had already expired (the permits went
-- back to the pool then); a NOPERM error naming a command the user may not
-- run (PUBLISH on the grant channel of the waiter queued first included):
-- nothing was changed (or, when permits went to other waiters first, the
-- permits were released and no more handed on).
local id = ARGV[1]
local denied = lock_denied(function(c)
  return sem_may(c) and c('GET', KEYS[6]) and c('SET', KEYS[6], '1', 'PX', '1')
end)
if denied then
  return denied
end
if ARGV[5] == '1' then
  local done = redis.call('GET', KEYS[6])
  if done then
    return tonumber(done)
  end
end
local expiry = redis.call('ZSCORE', KEYS[2], id)
if not expiry then
  return -1
end
local now = now_ms()
sem_load()
if tonumber(expiry) <= now then
  sem_reclaim(now)
  sem_handoff(now, ARGV[2], ARGV[3], nil, false)
  sem_save(now)
  return -2
end
local n = tonumber(redis.call('HGET', KEYS[3], id) or '0')
st.used = math.max(st.used - n, 0)
-- Our permit leaves the zset only after the hand-off, so that a grant does not
-- re-create it (and its expiry) when ours was the last.
st.pinned = true
local used = st.used
denied = select(2, sem_handoff(now, ARGV[2], ARGV[3], nil, false))
if denied and st.used == used then
  -- The permits cannot go to the head, who could not be told of them:
  -- refused before anything changed, rather than freed with no one told.
  return denied
end
st.pinned = false
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
sem_save(now)
if denied then
  return denied -- released, the rest not handed on: final, not retried
end
redis.call('SET', KEYS[6], n, 'PX', ARGV[4])
return n
