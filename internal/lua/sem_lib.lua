-- sem_lib: helpers shared by the semaphore scripts; prepended to each of them at
-- build time (see lua.go), so it declares functions only and touches no key.
--
-- Every semaphore script but sem_renew.lua receives the same first five KEYS:
--   KEYS[1] state hash: limit; used (permits held); seq (arrival counter,
--           see sem_arrival); auto
--           (present when the limit was established by a script from the limit
--           a Semaphore was configured with, rather than set by TrySetLimit or
--           SetLimit); pexp (the expiry, server time in ms, of the permits zset
--           and counts hash whenever they exist); sexp (the state hash's own
--           expiry; absent when the state is permanent)
--   KEYS[2] permits zset: permit id -> lease expiry (server time, ms)
--   KEYS[3] counts hash: permit id -> permits it holds
--   KEYS[4] queue zset: entry -> arrival number (FIFO order)
--   KEYS[5] waiter deadlines zset: entry -> deadline (server time, ms): the
--           time by which the waiter said it re-checks at the latest, plus
--           sem_grace; a waiter that stops re-checking loses its place when
--           it passes
--
-- A waiter's entry is id .. '/' .. n .. '/' .. lease .. '/' .. claim .. '/' ..
-- exact .. '/' .. secret: its permit id (client id ':' number), the permits it
-- asks for, the lease in ms it asks for, its claim window in ms (permits handed
-- to it are granted for the shorter of the two, see sem_handoff), the limit it
-- insists on ('' for any; a Lock's is 1), and a random hex secret known only
-- to the waiter and to whoever may read the queue key.
--
-- Direct hand-off: permits that become free while waiters are queued are never
-- left free for whoever asks next. The script that frees them (a release, an
-- abandon, a raised limit, an acquisition that found leases run out) grants them
-- at once to the waiters at the head of the queue, in arrival order, while what
-- the head asks for fits: from that moment the waiter holds them, with the lease
-- of its entry, exactly as if it had taken them itself. Each is told on its own
-- Client's grant channel (grant prefix .. client id, see core.GrantChannel):
--   '@' .. id .. ' ' .. n .. ':' .. a .. ':' .. sha1hex(secret .. ':' .. n .. ':' .. a)
-- where a is the arrival number of the place granted (see sem_arrival). Only
-- that Client's process receives it, whatever the number of processes
-- waiting, and anyone may publish on the channel, so the MAC proves the grant:
-- without the secret no one can make a waiter believe it holds permits. The
-- waiter takes only a grant to the place its last attempt reported: a grant it
-- let lapse, recorded and published again after it queued anew (at a new
-- place) under the same secret, proves nothing. A
-- PUBLISH that reaches no subscriber means the waiter's Client is gone (its
-- pub/sub connection closed, its process dead): the entry is dropped, nothing is
-- granted to it, and the next waiter is served in the same script.
--
-- Expiry: every key expires by itself once what it holds has run out, and
-- scripts set expiries only when they must move, not on every call. The
-- permits zset and counts hash expire at pexp, kept past their last lease
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
-- Bounds the waiters one script serves or drops, so that no script runs long.
local SEM_HANDOFF_MAX = 100

-- How many waiters at the head, left waiting behind a claimed grant, are told
-- when the claim lapses (see sem_handoff).
local SEM_CHASE = 2

-- The server time in milliseconds, read once per script call; sem_clock_us
-- is the same reading in microseconds (below 2^53, exact as a Lua number).
local sem_clock, sem_clock_us
local function now_ms()
  if not sem_clock then
    local t = redis.call('TIME')
    sem_clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    sem_clock = math.floor(sem_clock_us / 1000)
  end
  return sem_clock
end

-- Whether, by c, this user may run what the semaphore scripts may run on
-- KEYS[1..5]: with the script's own further key, its check before its first
-- write (see lock_denied).
local function sem_may(c)
  local st_key, permits, counts, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  return c('TIME') and
    c('HMGET', st_key, 'f') and c('HSET', st_key, 'f', '1') and c('HDEL', st_key, 'f') and
    c('HINCRBY', st_key, 'f', '1') and c('PEXPIREAT', st_key, '1') and c('PERSIST', st_key) and
    c('ZRANGE', permits, '0', '0') and c('ZRANGEBYSCORE', permits, '0', '0') and c('ZSCORE', permits, 'm') and
    c('ZADD', permits, '1', 'm') and c('ZREM', permits, 'm') and c('PEXPIREAT', permits, '1') and
    c('HGET', counts, 'f') and c('HSET', counts, 'f', '1') and c('HDEL', counts, 'f') and c('DEL', counts) and
    c('PEXPIREAT', counts, '1') and
    c('ZRANGE', queue, '0', '0') and c('ZSCORE', queue, 'm') and c('ZADD', queue, '1', 'm') and
    c('ZREM', queue, 'm') and c('ZCARD', queue) and c('PEXPIREAT', queue, '1') and
    c('ZRANGE', waiters, '0', '0') and c('ZRANGEBYSCORE', waiters, '0', '0') and c('ZSCORE', waiters, 'm') and
    c('ZADD', waiters, '1', 'm') and c('ZREM', waiters, 'm') and c('PEXPIREAT', waiters, '1')
end

-- The state hash as read by sem_load, changed in place by the helpers and
-- written back by sem_save.
local st

local function sem_load()
  local v = redis.call('HMGET', KEYS[1], 'limit', 'used', 'auto', 'pexp', 'sexp', 'seq')
  st = {
    exists = v[1] ~= false or v[2] ~= false or v[4] ~= false or v[5] ~= false,
    limit = tonumber(v[1]),
    used = tonumber(v[2]) or 0,
    auto = v[3] ~= false,
    pexp = tonumber(v[4]),
    sexp = tonumber(v[5]),
    seq = tonumber(v[6]) or 0,
  }
  st.used0, st.pexp0 = st.used, st.pexp
  -- pinned: the permits zset is known to hold a member whatever used says
  -- (the release's own, removed after the hand-off).
  st.pinned = false
  -- first: the earliest lease expiry, when a script looked it up.
  st.first = nil
end

-- The highest score of a zset, or nil when it is empty.
local function sem_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  return last and tonumber(last)
end

-- Establishes limit (a decimal string) if no limit is set, marking it auto:
-- the state hash then expires when the semaphore is idle. '' does nothing.
local function sem_establish(limit)
  if limit ~= '' and not st.limit then
    st.limit, st.auto, st.exists = tonumber(limit), true, true
    redis.call('HSET', KEYS[1], 'limit', limit, 'auto', 1)
  end
end

local function sem_available()
  return st.limit and (st.limit - st.used)
end

-- Makes the permits zset and counts hash outlive a lease ending at at. created:
-- the zset was empty (it did not exist) before the member was added.
local function sem_keep_permits(at, created)
  if not created and st.pexp and st.pexp > at then
    return
  end
  local target = at + 1 + SEM_SLACK_MS
  if not created and not st.pexp then
    -- Unknown (the state hash was lost): never cut a longer lease short.
    target = math.max(target, (sem_last(KEYS[2]) or 0) + 1)
  end
  st.pexp = target
  redis.call('PEXPIREAT', KEYS[2], target)
  redis.call('PEXPIREAT', KEYS[3], target)
end

-- Gives id n permits with a lease ending at at.
local function sem_take(id, n, at)
  local created = st.used <= 0 and not st.pinned
  redis.call('ZADD', KEYS[2], at, id)
  redis.call('HSET', KEYS[3], id, n)
  st.used = st.used + n
  sem_keep_permits(at, created)
  if not st.first or at < st.first then
    st.first = at
  end
end

-- Gives a new place in the queue its arrival number: above every number given
-- before, and the server clock in microseconds when that is higher (so an
-- inspection reads the time a place was taken from it, see sem_inspect.lua).
-- The counter lives in the state hash (a place needs a limit, so the
-- hash exists), read by sem_load; one created afresh (the hash expired when idle, or was lost)
-- starts from the server clock in microseconds, not from 1, above every number
-- the one before gave while places were taken slower than one per microsecond
-- (as for the Mutex's fencing counter, see mutex_tokens): a grant names the
-- place it was made to (see the top of this file), and no place is ever given
-- the number of another.
local function sem_arrival()
  now_ms()
  -- (Read by sem_load: one command per place, as HINCRBY would be.)
  local a = math.max(st.seq + 1, sem_clock_us)
  st.seq = a
  redis.call('HSET', KEYS[1], 'seq', string.format('%d', a))
  return a
end

-- Returns the permits of leases that ended to the pool; bounded per call so no
-- script runs long. Sets st.first to the earliest lease left (nil for none).
local function sem_reclaim(now)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[1] then
    -- Nothing held. When the zset expired as a whole (its last lease ended
    -- with nobody looking), the counter is stale.
    if st.used ~= 0 then
      st.used = 0
      redis.call('DEL', KEYS[3])
    end
    st.first = nil
    return
  end
  st.first = tonumber(first[2])
  if st.first > now then
    return
  end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(expired) do
    st.used = st.used - tonumber(redis.call('HGET', KEYS[3], id) or '0')
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[2], id)
  end
  st.used = math.max(st.used, 0)
  first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
  st.first = first and tonumber(first)
end

-- How long past its planned re-check a waiter keeps its place (ms): two thirds
-- of the lease in its entry, at least 2s so that a busy process re-checking
-- late keeps it. A waiter re-checks within a third of its watchdog timeout, so
-- one with the watchdog's lease loses its place within one watchdog timeout
-- (3s when that is longer) of its last check. The deadlines zset stores both
-- at once; the entry gives the grace back to read the planned re-check.
local function sem_grace(entry)
  local lease = tonumber(string.match(entry, '^[^/]+/%d+/(%d+)/%d+/%d*/%x+$') or '0')
  return math.max(math.floor(lease * 2 / 3), 2000)
end

local function sem_dequeue(entry)
  redis.call('ZREM', KEYS[4], entry)
  redis.call('ZREM', KEYS[5], entry)
end

-- Forgets waiters whose deadline passed (their process stopped re-checking).
local function sem_purge(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 1000)
  for _, entry in ipairs(gone) do
    sem_dequeue(entry)
  end
end

-- Returns the entries at the head of the queue, after forgetting lapsed
-- waiters: the head, its arrival number, and up to SEM_CHASE entries behind
-- it (the head once it leaves, and so on), or nil when no one waits. Costs
-- one command when no one waits.
local function sem_head(now)
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if not first[1] then
    return nil
  end
  if tonumber(first[2]) <= now then
    sem_purge(now)
  end
  local scored = redis.call('ZRANGE', KEYS[4], 0, SEM_CHASE, 'WITHSCORES')
  local behind = {}
  for i = 3, #scored, 2 do
    behind[#behind + 1] = scored[i]
  end
  return scored[1], tonumber(scored[2]), behind
end

-- Splits an entry into id, permits, the time a grant runs for (the shorter of
-- its lease and claim window), exact limit (nil for any), secret, the client
-- id of its permit id, and its lease; nil for an entry this version did not
-- write.
local function sem_parse(entry)
  local id, n, lease, claim, exact, secret = string.match(entry, '^([^/]+)/(%d+)/(%d+)/(%d+)/(%d*)/(%x+)$')
  local client = id and string.match(id, '^(.+):[^:]*$')
  if not client or tonumber(claim) <= 0 then
    return nil
  end
  return id, tonumber(n), math.min(tonumber(lease), tonumber(claim)), tonumber(exact), secret, client, tonumber(lease)
end

-- Serves the queue from its head with the permits free now (see the top of
-- this file): grants each head waiter what it asks for while it fits, drops
-- (and wakes, so that it fails at once) a head that can never be served under
-- the current limit, and stops at the first that does not fit, for which the
-- free permits are kept. Permits are granted for the waiter's claim window
-- when that is shorter than its lease: its Client extends them to the lease
-- once it has the grant, and a waiter paused or stuck with its connection open
-- (PUBLISH counts it as a receiver) holds them for the window only; the head
-- left waiting is then told '@' .. id .. ' ~' .. ms, so that it re-checks when
-- the first such claim lapses instead of when a lease it last saw would have;
-- only when it planned to re-check later than that (it queued behind a long
-- lease), so that a hand-off costs one message where waiters queue behind
-- claimed hand-offs (workers taking turns). The waiter behind it is told too
-- (SEM_CHASE), so that two hung waiters in a row cost two claim windows (see
-- mutex_handoff). self, when given, is the caller's
-- own entry: when it reaches the head nothing is done for it. inspect looks at
-- the head even when no permit is free (after the limit changed).
--
-- Returns true when self is at the head, nil when no one is queued (any more),
-- false when a waiter is left that does not fit (or, without inspect, when no
-- permit is free and the queue was not looked at); and false and the refusal
-- when the head may not be told of its grant (an ACL refuses its grant
-- channel): it is not granted anything and stays queued, and takes the permits
-- when it re-checks. Other messages that may not be published are left out.
local function sem_handoff(now, publish, prefix, self, inspect)
  local claimed -- the shortest claim granted by this call, if any
  local behind = {} -- the entries behind the last head looked up, in order
  -- Tells the first SEM_CHASE of left, the waiters left at the head, when the
  -- first claim lapses, those that planned to re-check later, and moves their
  -- deadlines to match.
  local function notice(left)
    for i = 1, claimed and math.min(#left, SEM_CHASE) or 0 do
      local entry = left[i]
      local id, _, _, _, _, client = sem_parse(entry)
      local by = now + claimed + sem_grace(entry)
      -- (A lapsed or unknown entry has no deadline beyond by: nobody to tell.)
      if id and entry ~= self and tonumber(redis.call('ZSCORE', KEYS[5], entry) or by) > by and
          lock_may_publish(publish, prefix .. client) then
        lock_publish(publish, prefix .. client, string.format('@%s ~%d', id, claimed))
        redis.call('ZADD', KEYS[5], 'XX', by, entry)
      end
    end
    return false
  end
  for _ = 1, SEM_HANDOFF_MAX do
    local avail = sem_available()
    if avail and avail <= 0 and not inspect then
      -- Every pass through the loop took the head out of the queue.
      return notice(behind)
    end
    local head, arrival
    head, arrival, behind = sem_head(now)
    if not head then
      return nil
    end
    if head == self then
      return true
    end
    local id, n, ttl, exact, secret, client, lease = sem_parse(head)
    if not id then
      -- Not written by this version: dropped; its waiter queues again at its
      -- next re-check.
      sem_dequeue(head)
    elseif not st.limit or n > st.limit or (exact and exact ~= st.limit) then
      sem_dequeue(head)
      if lock_may_publish(publish, prefix .. client) then
        lock_publish(publish, prefix .. client, '@' .. id)
      end
    elseif n > avail then
      return notice({head, unpack(behind)})
    elseif not lock_may_publish(publish, prefix .. client) then
      return notice({head, unpack(behind)}), lock_refusal(lock_publish_name(publish), prefix .. client,
        'the permits were not handed to the waiter queued first, who could not be told of it')
    else
      sem_dequeue(head)
      -- %d: a number concatenated as is may print as 1e+12.
      local grant = string.format('%d:%d', n, arrival)
      grant = grant .. ':' .. redis.sha1hex(secret .. ':' .. grant)
      if lock_publish(publish, prefix .. client, '@' .. id .. ' ' .. grant) > 0 then
        sem_take(id, n, now + ttl)
        if ttl < lease then
          claimed = math.min(claimed or ttl, ttl)
        end
      end
    end
  end
  return false
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
