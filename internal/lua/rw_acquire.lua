-- rw_acquire: take or re-enter the read or the write lock of an RWMutex, or
-- queue for it (see rw_lib.lua for the keys and for how writer preference is
-- kept). One script for the first attempt and every re-check of a waiter: a
-- re-check finds the hold a release granted to the waiter while it was
-- queued (and sets its lease afresh), or keeps its place in the queue. (A
-- waiter usually takes a grant from its message instead, see rw_lib.lua.)
--
-- KEYS[1..7] the RWMutex keys (see rw_lib.lua)
-- KEYS[8]    tombstone of this owner field, written by rw_abandon.lua
-- KEYS[9]    re-entry only: result latch of this request (same hash tag)
-- ARGV[1]    owner field (client id ":" hold id)
-- ARGV[2]    "r" for the read lock, "w" for the write lock
-- ARGV[3]    lease in milliseconds (also the lease a queued waiter asks to be
--            granted, see ARGV[12])
-- ARGV[4]    "1" to re-enter an existing hold of this owner, "0" otherwise
-- ARGV[5]    "1" to join (or stay in) the queue when not acquired, "0" not to
-- ARGV[6]    the longest a queued waiter waits before re-checking (ms; it
--            re-checks sooner when the holders' leases end sooner): its place
--            lapses its lease (2s at least) later (see queue_grace)
-- ARGV[7]    publish command: PUBLISH, SPUBLISH or PUBLISH? (see publish_lib.lua)
-- ARGV[8]    read channel: readers granted together are woken there
-- ARGV[9]    grant channel prefix: a writer granted the lock is woken on it
--            .. its client id
-- ARGV[10]   read lock only: the owner field of a write hold of the caller,
--            or '': a writer may take the read lock whoever waits
-- ARGV[11]   re-entry only: latch lifetime in milliseconds
-- ARGV[12]   this waiter's claim window in milliseconds, part of its queue
--            entry: a grant made to it while queued runs for the shorter of
--            it and the lease (see queue_lib.lua)
-- ARGV[13]   this waiter's secret (hex), part of its queue entry: a grant
--            message proves itself with it (see queue_lib.lua)
--
-- A re-entry is idempotent per request: a retry whose first attempt ran (its
-- reply was lost) returns the count that attempt reached.
--
-- Returns its numbers (one string of them, see lock_reply; a lone number as
-- is), written here as arrays:
--   {1, token, count}  acquired (or found granted to this owner); token is the
--                      fencing token (a writer's own; a reader gets the last
--                      writer's), count the hold count; a re-entry's token is 0
--   {0, wait, arrival} not acquired; wait is how long (ms) a waiter may sleep
--                      before something may change without a message (see
--                      rw_wait), -1 when the writer hash has no expiry; arrival
--                      the arrival number of the caller's place in the queue
--                      (0 when it did not queue): a grant message naming
--                      another was made to an earlier place and is stale
--   {-1}               a re-entry of a hold that is gone, or a read lock under
--                      a write hold (ARGV[10]) that is gone
--   {-2}               this owner field was abandoned
--   a NOPERM error     the user may not run a command this call may run
--                      (named in the error): nothing was changed
local owner, mode, lease = ARGV[1], ARGV[2], ARGV[3]
local publish, readch, grants = ARGV[7], ARGV[8], ARGV[9]
-- Reads come first, unchecked (lock_call); each path checks what it may run
-- from its first write on: the uncontended take only its own writes.
local now = now_ms()

-- Takes the read lock for owner (count 1, a lease from now); the reply. The
-- token is read first: a counter that is missing is made there, and the
-- grant then keeps it FENCE_KEEP_MS past the lease (fence_keep).
local function rw_take_read()
  local token = rw_token(lease)
  rw_grant_reader(now, owner, lease)
  return lock_reply(1, token, 1)
end

if ARGV[4] == '1' then
  local denied = lock_denied(function(c)
    return rw_may(c) and c('GET', KEYS[9]) and c('SET', KEYS[9])
  end)
  if denied then
    return denied
  end
  local done = redis.call('GET', KEYS[9])
  if done then
    -- Written again so that a WAIT after this call covers the first
    -- attempt's writes (see acquire.lua).
    redis.call('SET', KEYS[9], done, 'PX', ARGV[11])
    return lock_reply(1, 0, tonumber(done))
  end
  local count
  if mode == 'w' then
    if redis.call('HEXISTS', KEYS[1], owner) == 0 then
      return -1
    end
    count = redis.call('HINCRBY', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], lease)
  else
    rw_reclaim(now)
    if redis.call('HEXISTS', KEYS[3], owner) == 0 then
      return -1
    end
    count = redis.call('HINCRBY', KEYS[3], owner, 1)
    rw_renew_reader(now, owner, lease)
  end
  redis.call('SET', KEYS[9], count, 'PX', ARGV[11])
  return lock_reply(1, 0, count)
end

-- One EXISTS of the tombstone and of what holds or waits: none of them
-- (the common case) decides both; the tombstone is looked up apart only
-- when something exists.
local found = lock_call('EXISTS', KEYS[8], KEYS[1], KEYS[4], mode == 'w' and KEYS[2] or KEYS[4])
if found > 0 and lock_call('EXISTS', KEYS[8]) == 1 then
  return -2
end
-- No writer holds and no one is queued, and for a writer no reader holds
-- (not even one whose lease ran out, which only the general path below
-- reclaims): the lock is the caller's, as that path would find after more
-- reads. (A read hold of this owner that an attempt whose reply was lost
-- took is granted again: count 1 and a lease from now, as held() renews it.
-- A read lock under the caller's write hold, ARGV[10], takes the general
-- path, which checks that hold.)
if ARGV[10] == '' and found == 0 then
  local denied = lock_denied(function(c)
    if mode == 'r' then
      return rw_read_may(c)
    end
    return rw_write_may(c)
  end)
  if denied then
    return denied
  end
  if mode == 'r' then
    return rw_take_read()
  end
  return lock_reply(1, rw_grant_writer(owner, lease, lease), 1)
end
-- Below, the contended paths: the helpers only they call (the queue's and
-- the grants') are made at the next line (see contended in lua.go), by calls
-- that get there.
--@contended
local denied = lock_denied(rw_may)
if denied then
  return denied
end
local readers = rw_reclaim(now)

-- The hold of this owner, if it has one: granted while it was queued (its
-- message may be lost or late), or taken by an attempt whose reply was lost.
local function held()
  if mode == 'w' then
    local v = redis.call('HMGET', KEYS[1], owner, LOCK_TOKEN)
    if v[1] then
      redis.call('PEXPIRE', KEYS[1], lease)
      return lock_reply(1, tonumber(v[2] or '0'), tonumber(v[1]))
    end
  else
    local count = redis.call('HGET', KEYS[3], owner)
    if count then
      local token = rw_token(lease)
      rw_renew_reader(now, owner, lease)
      return lock_reply(1, token, tonumber(count))
    end
  end
  return nil
end

local mine = held()
if mine then
  return mine
end
if mode == 'r' and ARGV[10] ~= '' then
  -- A writer taking the read lock (to keep it after its write Unlock): no
  -- one else can hold it, and waiters must not stop it.
  if redis.call('HEXISTS', KEYS[1], ARGV[10]) == 0 then
    return -1
  end
  return rw_take_read()
end

-- The lock may be free for those queued first (a lease ran out, say).
local seen
denied, seen = rw_serve(now, owner, publish, readch, grants)
if denied then
  return denied
end
if not seen then
  -- Something was granted: perhaps to us; the lock and the readers are
  -- read again.
  mine = held()
  if mine then
    return mine
  end
  readers = nil
end
local entry = queue_entry(owner, lease, ARGV[12], ARGV[13], mode)
local free
if seen then
  free = seen.free
else
  free = redis.call('EXISTS', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[4]) == 0
end
if free then
  if mode == 'r' then
    return rw_take_read()
  end
  -- (No reader holds when the first that rw_reclaim read is none, if no
  -- grant came since.)
  local reading = readers and readers[1] ~= nil
  if readers == nil then
    reading = redis.call('ZCARD', KEYS[2]) > 0
  end
  if not reading then
    return lock_reply(1, rw_grant_writer(owner, lease, lease), 1)
  end
end

local wait = rw_wait(now, readers, seen and seen.pttl)
local arrival = 0
if ARGV[5] == '1' then
  local recheck = tonumber(ARGV[6])
  if wait >= 0 then
    recheck = math.min(wait, recheck)
  end
  arrival = queue_enqueue(rwq, entry, recheck)
end
return lock_reply(0, wait, arrival)
