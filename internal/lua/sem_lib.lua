-- sem_lib: helpers shared by the semaphore scripts; prepended to each of them at
-- build time after publish_lib.lua and queue_lib.lua (see lua.go), so it
-- declares functions only and touches no key.
--
-- Every semaphore script but sem_renew.lua receives the same first five KEYS:
--   KEYS[1] state hash: limit; used (permits held); seq (arrival counter,
--           see sem_arrival); q ('1' while someone may be queued, see
--           sem_enqueue); auto
--           (present when the limit was established by a script from the limit
--           a Semaphore was configured with, rather than set by TrySetLimit or
--           SetLimit); pexp (the expiry, server time in ms, of the permits zset,
--           and of the counts hash while m is set); m ('1' while the counts
--           hash may hold a count, see sem_count); sexp (the state hash's own
--           expiry; absent when the state is permanent)
--   KEYS[2] permits zset: permit id -> lease expiry (server time, ms); a
--           grant for a claim window is scored so that it tells (see
--           lease_score)
--   KEYS[3] counts hash: permit id -> permits it holds, for the ids that hold
--           more than one: an id in the permits zset without a count holds
--           one, so that a one-permit lease costs the hash nothing
--   KEYS[4] queue zset, KEYS[5] waiter deadlines zset: the wait queue (see
--           queue_lib.lua), whose arrival counter is the state hash's seq
--
-- A waiter's entry (see queue_lib.lua) is owned by its permit id (client id
-- ':' number) and asks for n permits, with '=' .. limit when it insists on
-- that limit (a Lock's is 1): n .. '=' .. limit.
--
-- Direct hand-off: permits that become free while waiters are queued are never
-- left free for whoever asks next. The script that frees them (a release, an
-- abandon, a raised limit, an acquisition that found leases run out) grants them
-- at once to the waiters at the head of the queue, in arrival order, while what
-- the head asks for fits: from that moment the waiter holds them, with the lease
-- of its entry, exactly as if it had taken them itself. Each is told on its own
-- Client's grant channel (grant prefix .. client id, see core.GrantChannel):
-- '@' .. id .. ' ' .. proof, of the arrival number of the place granted and
-- the permits (see queue_lib.lua). Only that Client's process receives it,
-- whatever the number of processes waiting. The waiter takes only a grant to
-- the place its last attempt reported. A PUBLISH that reaches no subscriber
-- means the waiter's Client is gone (its pub/sub connection closed, its
-- process dead): the entry is dropped, nothing is granted to it, and the next
-- waiter is served in the same script.
--
-- Expiry: every key expires by itself once what it holds has run out, and
-- scripts set expiries only when they must move, not on every call. The
-- permits zset expires at pexp, and so does the counts hash while m says it
-- may hold a count (it is given an expiry whenever a count is written in it),
-- kept past their last lease
-- (when it must move, it is set SEM_SLACK_MS beyond, so that a busy semaphore
-- moves it about once a second rather than on every grant); the queue and
-- deadline zsets expire with their last deadline; the state hash, unless its
-- limit was set by hand, at sexp: SEM_IDLE_MS past both (plus the slack), or up
-- to SEM_SHRINK_MS more after a longer lease ended early. Emptied zsets and
-- hashes disappear at once (Redis deletes them).

-- How long the state hash of a semaphore with an auto limit outlives its last
-- lease and waiter deadline (sem_renew.lua repeats the value).
local SEM_IDLE_MS = 1000
-- How far beyond what is needed pexp and sexp are set when they must move.
local SEM_SLACK_MS = 1000
-- sexp is brought down again when it lies this far beyond what is needed (a
-- lease longer than this ended early): far enough that a semaphore used with
-- watchdog leases (30s) does not move it down and up again on every release
-- that leaves it idle and every acquisition that follows.
local SEM_SHRINK_MS = 60000

-- A waiter re-checks within a third of its watchdog timeout (the lease in its
-- entry), and keeps its place two thirds of it more: it loses its place within
-- one watchdog timeout (3s when that is longer) of its last check.
queue_grace_num, queue_grace_den = 2, 3

-- The semaphore's queue (see queue_lib.lua), set at the start of each call.
local semq

-- Whether, by c, this user may run what the semaphore scripts may run on
-- KEYS[1..5]: with the script's own further key, its check before its first
-- write (see lock_denied).
local function sem_may(c)
  local st_key, permits, counts = KEYS[1], KEYS[2], KEYS[3]
  return c('HMGET', st_key) and c('HSET', st_key) and c('HDEL', st_key) and
    c('HINCRBY', st_key) and c('PEXPIREAT', st_key) and c('PERSIST', st_key) and
    c('ZRANGE', permits) and c('ZRANGEBYSCORE', permits) and c('ZSCORE', permits) and
    c('ZADD', permits) and c('ZREM', permits) and c('PEXPIREAT', permits) and
    c('HGET', counts) and c('HSET', counts) and c('HDEL', counts) and c('DEL', counts) and
    c('PEXPIREAT', counts) and queue_may(c, semq)
end

-- What a take that finds no one queued and no lease to reclaim runs from
-- its first write on (see sem_may): the lease (sem_take, with its count when
-- want is not '1'), the expiries kept past it, and the state written back
-- (sem_save); the counts hash's HGET, whose refusal sem_counts_usable would
-- read as a key of another kind.
local function sem_take_may(c, want)
  local st_key, permits, counts = KEYS[1], KEYS[2], KEYS[3]
  return c('ZADD', permits) and c('ZREM', permits) and c('PEXPIREAT', permits) and c('ZRANGE', permits) and
    c('HGET', counts) and (want == '1' or c('HSET', counts)) and c('PEXPIREAT', counts) and
    c('HSET', st_key) and c('PEXPIREAT', st_key) and c('ZRANGE', semq.waiters)
end

-- What a release that finds no one queued and names no successor runs from
-- its first write on: the lease dropped (sem_drop) and the state written back
-- (sem_save), the counts hash's HGET as for sem_take_may.
local function sem_release_may(c)
  local st_key, permits, counts = KEYS[1], KEYS[2], KEYS[3]
  return c('ZREM', permits) and c('ZRANGE', permits) and c('HGET', counts) and c('HDEL', counts) and
    c('HSET', st_key) and c('PEXPIREAT', st_key) and c('ZRANGE', semq.waiters)
end

-- The state hash as read by sem_load, changed in place by the helpers and
-- written back by sem_save.
local st
script_begins[#script_begins + 1] = function()
  semq, st = {queue = KEYS[4], waiters = KEYS[5]}, nil
end

local function sem_load()
  local v = lock_call('HMGET', KEYS[1], 'limit', 'used', 'auto', 'pexp', 'sexp', 'seq', 'q', 'm')
  st = {
    exists = v[1] ~= false or v[2] ~= false or v[4] ~= false or v[5] ~= false,
    limit = tonumber(v[1]),
    used = tonumber(v[2]) or 0,
    auto = v[3] ~= false,
    pexp = tonumber(v[4]),
    sexp = tonumber(v[5]),
    seq = tonumber(v[6]) or 0,
    queued = v[7] == '1',
    -- A state hash without m was written before m existed, when every
    -- lease had a count: while permits are held, look them up.
    counted = v[8] == '1' or (v[8] == false and tonumber(v[2] or '0') > 0),
  }
  st.used0, st.pexp0, st.seq0, st.queued0 = st.used, st.pexp, st.seq, st.queued
  -- (nil when m is missing, so that sem_save writes it.)
  st.counted0 = nil
  if v[8] then
    st.counted0 = st.counted
  end
  -- counts_ok: what sem_counts_usable found.
  st.counts_ok = nil
  -- established: the limit sem_establish set, written by sem_save.
  st.established = nil
  -- pinned: the permits zset is known to hold a member whatever used says
  -- (the release's own, removed after the hand-off).
  st.pinned = false
  -- first: the earliest lease expiry, when a script looked it up.
  st.first = nil
end

-- The highest score of a zset (a lease's end, see lease_end), or nil when it
-- is empty.
local function sem_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  return last and lease_end(last)
end

-- Establishes limit (a decimal string) if no limit is set, marking it auto:
-- the state hash then expires when the semaphore is idle. '' does nothing.
-- sem_save writes it, with the rest of the state.
local function sem_establish(limit)
  if limit ~= '' and not st.limit then
    st.limit, st.auto, st.exists, st.established = tonumber(limit), true, true, limit
  end
end

local function sem_available()
  return st.limit and (st.limit - st.used)
end

-- The milliseconds until the earliest lease ends (st.first, as sem_reclaim
-- or sem_take left it), -1 when no permit is held: what a request that did
-- not get its permits is told to wait at most.
local function sem_wait(now)
  if st.first then
    return math.max(st.first - now, 0)
  end
  return -1
end

-- Makes the permits zset, and the counts hash while it may hold a count,
-- outlive a lease ending at at. created: the zset was empty (it did not
-- exist) before the member was added. counted: a count was just written,
-- perhaps in a new hash, which needs an expiry even when pexp stays.
local function sem_keep_permits(at, created, counted)
  if not created and st.pexp and st.pexp > at then
    if counted then
      redis.call('PEXPIREAT', KEYS[3], st.pexp)
    end
    return
  end
  local target = at + 1 + SEM_SLACK_MS
  if not created and not st.pexp then
    -- Unknown (the state hash was lost): never cut a longer lease short.
    target = math.max(target, (sem_last(KEYS[2]) or 0) + 1)
  end
  st.pexp = target
  redis.call('PEXPIREAT', KEYS[2], target)
  if st.counted then
    redis.call('PEXPIREAT', KEYS[3], target)
  end
end

-- The permits held by id, which has a lease in the permits zset, and whether
-- the counts hash has a count of it (to delete with the lease). Unless m is
-- set (or missing, see sem_load), no holder has a count: m is set by every
-- script that writes one, and cleared only when no permit is held
-- (sem_save).
local function sem_count(id)
  if st.counted then
    -- (A key of another kind there holds no count: see sem_counts_usable.)
    local n = redis.pcall('HGET', KEYS[3], id)
    if type(n) == 'string' then
      return tonumber(n), true
    end
  end
  return 1, false
end

-- Whether the counts hash can take a count: missing, or a hash. Someone
-- else's key of another kind there fails every lease of more than one permit
-- before anything changes (see sem_acquire.lua and sem_fits); one-permit
-- leases never touch it. Looked up once per call, by an HGET (which the
-- user may run, see sem_may; TYPE is not in the README's rule): only a key
-- of another kind makes it fail.
local function sem_counts_usable()
  if st.counts_ok == nil then
    local r = redis.pcall('HGET', KEYS[3], '')
    st.counts_ok = not (type(r) == 'table' and r.err)
  end
  return st.counts_ok
end

-- The error of a lease of more than one permit that the counts hash cannot
-- count (see sem_counts_usable).
local function sem_counts_refusal()
  return redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ' is a key of another kind, so the semaphore cannot count a lease of more than one permit; nothing was changed')
end

-- Takes id's lease out of the permits zset and its count, if it has one, out
-- of the counts hash. counted: as sem_count returned.
local function sem_drop(id, counted)
  redis.call('ZREM', KEYS[2], id)
  if counted then
    redis.call('HDEL', KEYS[3], id)
  end
end

-- Gives id n permits with a lease ending at at; claimed for a grant of a
-- claim window (see lease_score). Only a lease of more than one permit is
-- counted in the counts hash (see sem_count).
local function sem_take(id, n, at, claimed)
  local created = st.used <= 0 and not st.pinned
  local counted = n ~= 1
  queue_hold_lease(KEYS[2], counted and KEYS[3] or nil, id, lease_score(at, claimed), n)
  st.used = st.used + n
  st.counted = st.counted or counted
  sem_keep_permits(at, created, counted)
  if not st.first or at < st.first then
    st.first = at
  end
end

-- A new arrival number (see queue_lib.lua), counted in the state hash (a
-- place needs a limit, so the hash exists), read by sem_load and written by
-- sem_save. One created afresh (the hash expired when idle, or was lost)
-- starts from the server clock, as queue_arrival does.
local function sem_arrival()
  local a = queue_arrival(st.seq)
  st.seq = a
  return a
end

-- Joins the queue as queue_enqueue does, with an arrival number of the state
-- hash, and marks the semaphore as one that may have waiters (q), so that
-- scripts look at its queue: those that find q unset skip it (see
-- sem_handoff). Every script that queues a waiter does so through here.
local function sem_enqueue(entry, recheck, look)
  st.queued = true
  return queue_enqueue(semq, entry, recheck, sem_arrival, look)
end

-- The permits zset's earliest lease (nil when no permit is counted as held),
-- read before the script's first write, and whether sem_reclaim, given it,
-- would change anything.
local function sem_first_lease(now)
  if st.used == 0 then
    return nil, false
  end
  local first = lock_call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[1] then
    return first, st.counted
  end
  return first, lease_end(first[2]) <= now
end

-- Returns the permits of leases that ended to the pool; bounded per call so no
-- script runs long. Sets st.first to the earliest lease left (nil for none).
-- With no permit counted as held there is nothing to look at: every script
-- that puts a lease in the permits zset counts it in used in the same step
-- (sem_take), and every one that takes it out uncounts it. first: the
-- earliest lease as sem_first_lease read it, if the caller did.
local function sem_reclaim(now, first)
  if st.used == 0 then
    st.first = nil
    return
  end
  first = first or redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[1] then
    -- Nothing held. When the zset expired as a whole (its last lease ended
    -- with nobody looking), the counter is stale.
    if st.used ~= 0 then
      st.used = 0
      if st.counted then
        redis.call('DEL', KEYS[3])
      end
    end
    st.first = nil
    return
  end
  st.first = lease_end(first[2])
  if st.first > now then
    return
  end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(expired) do
    local n, counted = sem_count(id)
    st.used = st.used - n
    sem_drop(id, counted)
  end
  st.used = math.max(st.used, 0)
  first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
  st.first = first and lease_end(first)
end

-- Whether the semaphore may grant at all, or what the head waiter (id, asking
-- ask) gets (see queue_serve): permits while they fit, k.n of them; nothing,
-- and it is dropped and told, when it can never be served under the current
-- limit; nil for an entry this version did not write. k.inspect looks at the
-- head even when no permit is free (after the limit changed).
local function sem_fits(k, id, ask)
  local avail = sem_available()
  if not id then
    return not avail or avail > 0 or k.inspect
  end
  local n, exact = string.match(ask, '^(%d+)=?(%d*)$')
  if not n or not string.find(id, ':', 1, true) then
    return nil
  end
  n, exact = tonumber(n), tonumber(exact)
  if not st.limit or n > st.limit or (exact and exact ~= st.limit) or (n > 1 and not sem_counts_usable()) then
    return 'never'
  end
  k.n = n
  return n <= avail
end

-- Whether a holder's permits may be kept for its successor, whose queue
-- entry is entry (see sem_release.lua): only while the limit allows what the
-- successor asks for (as sem_fits would) and the permits held now.
local function sem_keeps(entry)
  local _, _, _, _, ask = queue_parse(entry)
  local n, exact = string.match(ask or '', '^(%d+)=?(%d*)$')
  n, exact = tonumber(n), tonumber(exact)
  return n ~= nil and st.limit ~= nil and n <= st.limit and st.used <= st.limit and
    (exact == nil or exact == st.limit)
end

local function sem_grant(k, _, arrival, _, lease, ttl, secret)
  k.claimed = ttl < lease
  return queue_proof(secret, arrival, k.n)
end

-- The permits are taken once the grant is heard: one no one heard took none.
local function sem_settle(k, heard, id, ttl)
  if heard then
    sem_take(id, k.n, k.now + ttl, k.claimed)
  end
  return true
end

-- Serves the queue from its head with the permits free now (see the top of
-- this file and queue_serve): grants each head waiter what it asks for while
-- it fits, drops (and wakes, so that it fails at once) a head that can never
-- be served under the current limit, and stops at the first that does not
-- fit, for which the free permits are kept. self, when given, is the caller's
-- own entry: when it reaches the head nothing is done for it. inspect looks
-- at the head even when no permit is free (after the limit changed). Reads
-- nothing when q says no one is queued (see sem_enqueue) and neither self nor
-- inspect asks it to. Returns
-- as queue_serve does: false (with, if so, the refusal) when a waiter is left
-- that does not fit, or, without inspect, when no permit is free and the
-- queue was not looked at.
local function sem_handoff(now, publish, prefix, self, inspect)
  if not st.queued and not self and not inspect then
    return nil
  end
  local mine, refusal = queue_serve(semq, self, publish, {grants = prefix, inspect = inspect, now = now,
    fits = sem_fits, grant = sem_grant, settle = sem_settle})
  if mine == nil then
    st.queued = false -- the queue is empty
  end
  return mine, refusal
end

-- Writes back what changed in the state hash and keeps it alive as long as it
-- must: past every lease (pexp) and waiter deadline (horizon, the latest this
-- script set, if any) by SEM_IDLE_MS, unless its limit was set by hand. It
-- never creates the state hash unless the script established a limit.
local function sem_save(now, horizon)
  if not st.exists then
    return
  end
  local fields = {}
  if st.established then
    fields[#fields + 1], fields[#fields + 2] = 'limit', st.established
    fields[#fields + 1], fields[#fields + 2] = 'auto', '1'
  end
  if st.seq ~= st.seq0 then
    fields[#fields + 1], fields[#fields + 2] = 'seq', string.format('%d', st.seq)
  end
  if st.queued ~= st.queued0 then
    fields[#fields + 1], fields[#fields + 2] = 'q', st.queued and '1' or '0'
  end
  if st.used <= 0 and not st.pinned then
    st.counted = false -- no holder, so no count that matters
  end
  if st.counted ~= st.counted0 then
    fields[#fields + 1], fields[#fields + 2] = 'm', st.counted and '1' or '0'
  end
  if st.used ~= st.used0 then
    fields[#fields + 1] = 'used'
    fields[#fields + 1] = string.format('%d', st.used)
  end
  if st.pexp ~= st.pexp0 then
    fields[#fields + 1] = 'pexp'
    fields[#fields + 1] = string.format('%d', st.pexp)
  end
  local expire = false
  if not st.limit or st.auto then
    local need = now
    if st.used > 0 then
      -- pexp is missing only when the permits were written by another
      -- version: then look.
      need = math.max(need, st.pexp or sem_last(KEYS[2]) or 0)
    end
    if horizon then
      need = math.max(need, horizon)
    end
    need = need + SEM_IDLE_MS
    if st.sexp and st.sexp > need + SEM_SHRINK_MS then
      -- Far beyond what leases need: other waiters may still need it.
      need = math.max(need, (sem_last(KEYS[5]) or 0) + SEM_IDLE_MS)
    end
    if not st.sexp or st.sexp < need or st.sexp > need + SEM_SHRINK_MS then
      st.sexp = need + SEM_SLACK_MS
      fields[#fields + 1] = 'sexp'
      fields[#fields + 1] = string.format('%d', st.sexp)
      expire = true
    end
  end
  if #fields > 0 then
    redis.call('HSET', KEYS[1], unpack(fields))
  end
  if expire then
    redis.call('PEXPIREAT', KEYS[1], st.sexp)
  end
end
