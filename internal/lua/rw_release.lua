-- rw_release: drop one level of a read or write hold of an RWMutex. The last
-- level of a write hold frees the lock for the head of the queue: a writer, or
-- every reader up to the next writer, woken by one message (see rw_lib.lua);
-- the last reader to leave serves a writer at the head, woken by one message.
-- Idempotent per request id: a retry of a release whose reply was lost
-- returns the first outcome instead of releasing again.
--
-- KEYS[1..7] the RWMutex keys (see rw_lib.lua)
-- KEYS[8]    result latch of this request (same hash tag)
-- KEYS[9]    tombstone of this owner field (see ARGV[8])
-- ARGV[1]    owner field
-- ARGV[2]    "r" for a read hold, "w" for a write hold
-- ARGV[3]    lease in milliseconds, set afresh while levels remain
-- ARGV[4]    publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[5]    read channel
-- ARGV[6]    grant channel prefix
-- ARGV[7]    latch lifetime in milliseconds
-- ARGV[8]    tombstone lifetime in milliseconds, or '0': when an acquisition
--            attempt of this owner field may still run late (its reply was
--            lost), freeing it leaves a tombstone so that it is refused
-- ARGV[9]    '0' when no earlier attempt of this request was sent: the latch
--            is not read (a first attempt cannot find one); else, or when
--            missing (an older Client), it is
--
-- Returns left, the levels left (0: the hold is gone), or -1 when the
-- owner holds no such hold (never did, or its lease ran out); a NOPERM error
-- naming a command the user may not run (PUBLISH on the read channel
-- included, for the last level with waiters queued): nothing was changed;
-- or, the head of the queue being refused its grant channel, the hold was
-- released and the lock not handed on.
local owner, mode, lease = ARGV[1], ARGV[2], ARGV[3]
-- Reads come first, unchecked (lock_call). A release that finds no reader's
-- lease run out and no one queued (the common case) checks what it may run
-- from its first write on; any other the commands of every path.
local done = ARGV[9] ~= '0' and lock_call('GET', KEYS[8])
if done then
  return tonumber(done)
end
local now = now_ms()
local readers = lock_call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local lapsed = readers[1] and tonumber(readers[2]) <= now
local queued = queue_first(rwq)[1]
local denied = lock_denied(function(c)
  if lapsed or queued then
    return rw_may(c) and c('SET', KEYS[8]) and c('SET', KEYS[9])
  end
  return rw_release_may(c, mode) and c('SET', KEYS[8]) and (ARGV[8] == '0' or c('SET', KEYS[9]))
end)
if denied then
  return denied
end
-- One level released: what every path does. serve, given when someone is
-- queued, hands the freed lock on (see rw_serve).
local function release(serve)
  local key = KEYS[1]
  if mode == 'r' then
    key = KEYS[3]
  end
  local count, token
  if mode == 'w' then
    count, token = unpack(lock_call('HMGET', key, owner, LOCK_TOKEN))
  else
    count = lock_call('HGET', key, owner)
  end
  if not count then
    return -1
  end
  local left = tonumber(count) - 1
  if left <= 0 and serve and not lock_may_publish(ARGV[4], ARGV[5]) then
    -- The last level may have to tell waiters of their grant: refused
    -- before it changes anything, rather than freed with no one told.
    return lock_refusal(lock_publish_name(ARGV[4]), ARGV[5], 'nothing was changed')
  end
  if left > 0 then
    redis.call('HSET', key, owner, left)
    if mode == 'w' then
      redis.call('PEXPIRE', KEYS[1], lease)
    else
      rw_renew_reader(now, owner, lease)
    end
  else
    lock_bury(KEYS[9], ARGV[8])
    if mode == 'w' then
      redis.call('DEL', KEYS[1])
      rw_keep_writer_token(tonumber(token), now, lease)
    else
      rw_drop_reader(owner)
    end
    local refused = serve and serve()
    if refused then
      return refused -- freed, not handed on: final, not retried (no latch)
    end
  end
  redis.call('SET', KEYS[8], left, 'PX', ARGV[7])
  return left
end

if not (lapsed or queued) then
  return release()
end
-- Below, a reader's lease run out or someone queued: the helpers of
-- reclaiming and serving are made at the next line (see contended in
-- lua.go), by calls that get there.
--@contended
rw_reclaim(now, readers)
return release(queued and function()
  return rw_serve(now, nil, ARGV[4], ARGV[5], ARGV[6], mode == 'w')
end)
