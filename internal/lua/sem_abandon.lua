-- sem_abandon: give up a waiter or an acquisition with an unknown outcome: take
-- its entry out of the queue, return any permits the id holds, and hand what is
-- free on to the next in line (see sem_lib.lua). The tombstone makes a late
-- sem_acquire.lua for the id refuse. Idempotent.
--
-- KEYS[1..5]  the semaphore keys (see sem_lib.lua)
-- KEYS[6]     tombstone of the permit id
-- ARGV[1]     permit id
-- ARGV[2]     its queue entry (see sem_lib.lua), or '' when it cannot be queued
-- ARGV[3]     tombstone lifetime in milliseconds
-- ARGV[4]     publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[5]     grant channel prefix: a waiter's channel is it .. its client id
--
-- Returns the permits returned to the pool (0 when it held none).
local id = ARGV[1]
-- (A grant that could not be announced is not made, see sem_handoff; the id
-- is given up all the same.)
local denied = lock_denied(function(c)
  return sem_may(c) and c('SET', KEYS[6])
end)
if denied then
  return denied
end
redis.call('SET', KEYS[6], 1, 'PX', ARGV[3])
local now = now_ms()
sem_load()
if ARGV[2] ~= '' then
  queue_dequeue(semq, ARGV[2])
end
local n = 0
if redis.call('ZSCORE', KEYS[2], id) then
  local counted
  n, counted = sem_count(id)
  st.used = math.max(st.used - n, 0)
  sem_drop(id, counted)
end
sem_reclaim(now)
sem_handoff(now, ARGV[4], ARGV[5], nil, false)
sem_save(now)
return n
