-- sem_limit: set the limit of a semaphore, or read its state.
--
-- KEYS[1..5]  the semaphore keys (see sem_lib.lua)
-- ARGV[1]     "get", "init" (set only if no limit is set) or "set"
-- ARGV[2]     the new limit, a non-negative integer (ignored by "get")
-- ARGV[3]     publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[4]     grant channel prefix: a waiter's channel is it .. its client id
-- ARGV[5]     "get" only: limit to establish (marked auto) when none is set,
--             a non-negative integer, or "" for none
--
-- Returns {changed, limit, used, queued}: changed is 1 when the limit was
-- written; limit is -1 when none is set. Permits free under a raised limit are
-- handed to the waiters at the head of the queue (see sem_lib.lua), and a head
-- that asks for more than a lowered limit is dropped and woken, so that it
-- fails; lowering the limit lets current holders finish (used may exceed limit
-- until they do). "init" and "set" make the state permanent (no auto mark, no
-- expiry), whether or not they write the limit: a limit set by hand cannot be
-- re-established.
-- (A grant that could not be announced is not made, see sem_handoff.)
local denied = lock_denied(function(c)
  return sem_may(c)
end)
if denied then
  return denied
end
local now = now_ms()
sem_load()
sem_reclaim(now)
queue_head(semq) -- forgets lapsed waiters
local changed = 0
if ARGV[1] == 'set' or (ARGV[1] == 'init' and not st.limit) then
  redis.call('HSET', KEYS[1], 'limit', ARGV[2])
  st.limit, st.exists = tonumber(ARGV[2]), true
  changed = 1
end
if ARGV[1] == 'get' then
  sem_establish(ARGV[5] or '')
  sem_handoff(now, ARGV[3], ARGV[4], nil, false)
else
  redis.call('HDEL', KEYS[1], 'auto', 'sexp')
  redis.call('PERSIST', KEYS[1])
  st.auto, st.sexp = false, nil
  sem_handoff(now, ARGV[3], ARGV[4], nil, true)
end
sem_save(now)
return {changed, st.limit or -1, st.used, redis.call('ZCARD', KEYS[4])}
