-- queue_lib: the wait queue of every lock kind (Mutex, RWMutex, semaphore);
-- prepended after publish_lib.lua at build time (see lua.go), so it declares
-- functions only and touches no key. A queue q is a table of its keys, which
-- share the lock's hash tag:
--   q.queue    zset: entry -> arrival number (FIFO order): the server clock in
--              microseconds when the place was taken, or one past the number
--              before when that is later (queue_arrival), so that no place is
--              ever given the number of another, even after the counter
--              expired, and an inspection reads when a place was taken
--   q.waiters  zset: entry -> deadline (server time, ms): the time by which the
--              waiter said it re-checks at the latest, plus queue_grace; a
--              waiter that stops re-checking loses its place when it passes
--   q.seq      the arrival counter (nil: the kind keeps it, the semaphore in
--              its state hash)
-- The three expire together just after the latest deadline, by which every
-- place in them has lapsed: a queue whose waiters all vanished leaves nothing
-- behind. (Deadlines are only ever brought forward after that, never pushed
-- back.)
--
-- An entry is owner .. '/' .. lease .. '/' .. claim .. '/' .. secret .. '/' ..
-- ask: the waiter's owner field or permit id (client id ':' number); the
-- lease (ms) it asked for; its claim window (ms): a grant
-- made to it while it waits runs for the shorter of the two (see Claims); a
-- random hex secret known only to the waiter and to whoever may read the
-- queue key; what it asks for, per kind ('' for a Mutex, 'r' or 'w' for an
-- RWMutex, the permits for a semaphore, with '=' .. limit when it insists on
-- that limit).
--
-- Grants: the lock (or permits) a waiter is granted while it waits is its
-- from that moment, as if it had taken it itself. The waiter is told by a
-- message on its Client's grant channel (queue_channel), or, for readers
-- granted together, on the lock's read channel: '@' .. addressee .. ' ' ..
-- proof (proofs, space-separated, for a batch), where
--   proof = arrival .. ':' .. field .. ... .. ':' .. mac
--   mac   = sha1hex(secret .. ':' .. arrival .. ':' .. field .. ...)
-- for the arrival number of the place granted and the kind's fields (the
-- fencing tokens of the grant, the permits). Anyone may publish on the
-- channels, but only Redis (or a reader of the queue key) can prove a grant,
-- and nothing it says can be altered; as no place is ever granted twice nor
-- given the number of another, a waiter that takes only a grant to the place
-- its last check saw (or, for the Mutex, with tokens above the counter that
-- check saw) never takes a grant it let lapse, read late or replayed after it
-- queued again under the same secret. A grant that no subscriber hears (the
-- waiter's Client is gone: its connection closed) is undone at once, and the
-- next waiter served.
--
-- Claims: a grant runs for the waiter's claim window, not its whole lease,
-- when that is shorter: the Client that receives it extends it to the lease
-- with its next renewal (batched), and a waiter paused or stuck with its
-- connection open (PUBLISH counts it as a receiver) holds the grant for the
-- claim window only. The QUEUE_CHASE waiters then at the head are told '@' ..
-- addressee .. ' ~' .. ms, so that they re-check when the claim lapses
-- instead of when the lease they last saw would have; only those that planned
-- to re-check later than that (queued behind a long lease), so that a grant
-- costs one message where waiters queue behind claimed grants (workers
-- taking turns). Telling the second one too makes two hung waiters in a row
-- cost two claim windows, not a re-check interval: when the first claim
-- lapses, the second one's re-check grants the lock to the next hung waiter,
-- and its reply tells it when that claim lapses in turn (queue_chase).

local QUEUE_CHASE = 2

-- How long past its planned re-check a waiter keeps its place, as a share of
-- the lease in its entry (2s at least, so that a busy process re-checking
-- late keeps it): a kind sets it to match how often its waiters re-check
-- (the semaphore's re-check within a third of the watchdog timeout, and keep
-- it two thirds more). The waiters zset stores both at once; the entry gives
-- the grace back to read the planned re-check.
local queue_grace_num, queue_grace_den = 1, 1

local function queue_grace(lease)
  return math.max(math.floor(lease * queue_grace_num / queue_grace_den), 2000)
end

-- Whether, by c, this user may run what this library runs on q's keys (see
-- lock_denied).
local function queue_may(c, q)
  local ok = c('TIME') and
    c('ZRANGE', q.queue, '0', '0') and c('ZSCORE', q.queue, 'm') and c('ZADD', q.queue, '1', 'm') and
    c('ZREM', q.queue, 'm') and c('ZCARD', q.queue) and c('PEXPIREAT', q.queue, '1') and
    c('ZRANGE', q.waiters, '0', '0') and c('ZRANGEBYSCORE', q.waiters, '0', '0') and
    c('ZSCORE', q.waiters, 'm') and c('ZADD', q.waiters, '1', 'm') and c('ZREM', q.waiters, 'm') and
    c('PEXPIREAT', q.waiters, '1')
  return ok and (not q.seq or c('SET', q.seq, '1', 'GET') and c('PEXPIREAT', q.seq, '1'))
end

local function queue_entry(owner, lease, claim, secret, ask)
  return owner .. '/' .. lease .. '/' .. claim .. '/' .. secret .. '/' .. ask
end

-- Splits an entry into owner, lease, the time a grant to it runs for (the
-- shorter of its lease and claim window), secret and ask; nil for one this
-- version did not write.
local function queue_parse(entry)
  local owner, lease, claim, secret, ask = string.match(entry, '^(.+)/(%d+)/(%d+)/(%x+)/([^/]*)$')
  lease, claim = tonumber(lease), tonumber(claim)
  if not lease or lease <= 0 or claim <= 0 then
    return nil
  end
  return owner, lease, math.min(lease, claim), secret, ask
end

-- The grant channel of the Client of an owner field (grants: the prefix, see
-- Client.NewID and core.GrantChannel).
local function queue_channel(grants, owner)
  return grants .. (string.match(owner, '^(.+):[^:]*$') or owner)
end

-- The refusal of a grant that could not be announced on channel: it is not
-- made, and the waiter stays queued and takes it when it re-checks.
local function queue_unannounced(publish, channel)
  return lock_refusal(lock_publish_name(publish), channel,
    'nothing was handed to the waiters queued first, who could not be told of it')
end

local function queue_dequeue(q, entry)
  redis.call('ZREM', q.queue, entry)
  redis.call('ZREM', q.waiters, entry)
end

-- Returns the head entry after forgetting lapsed waiters (whose process
-- stopped re-checking: their deadline passed), its arrival number
-- and the QUEUE_CHASE entries behind it (the head once it leaves, and so on);
-- nil when no one waits. Costs one command when no one waits (the clock is
-- read only when someone does).
local function queue_head(q)
  local first = redis.call('ZRANGE', q.waiters, 0, 0, 'WITHSCORES')
  if not first[1] then
    return nil
  end
  if tonumber(first[2]) <= now_ms() then
    for _, entry in ipairs(redis.call('ZRANGEBYSCORE', q.waiters, '-inf', clock_ms, 'LIMIT', 0, 1000)) do
      queue_dequeue(q, entry)
    end
  end
  local scored = redis.call('ZRANGE', q.queue, 0, QUEUE_CHASE, 'WITHSCORES')
  local behind = {}
  for i = 3, #scored, 2 do
    behind[#behind + 1] = scored[i]
  end
  return scored[1], tonumber(scored[2]), behind
end

-- A new arrival number, given the counter's number before (nil for none);
-- seq, when given, is the counter key, set to it.
local function queue_arrival(before, seq)
  now_ms()
  if seq then
    -- (SET .. GET: one command per place, as INCR would be; queue_enqueue
    -- sets its expiry.)
    before = redis.call('SET', seq, string.format('%d', clock_us), 'GET')
  end
  local a = math.max((tonumber(before) or 0) + 1, clock_us)
  if seq and a ~= clock_us then
    redis.call('SET', seq, string.format('%d', a))
  end
  return a
end

-- Joins the queue, or keeps the place entry has (its arrival number); recheck
-- is the most milliseconds from now after which the waiter re-checks. arrive,
-- when given, makes a new arrival number (else q.seq does). look says how the
-- place is found: 'fresh' when entry cannot be queued yet, 'blind' when the
-- caller needs no arrival number back (a new number is drawn and dropped if
-- entry has one), else it is looked up first. Returns the arrival number
-- (nil when blind) and the latest deadline in the queue.
local function queue_enqueue(q, entry, recheck, arrive, look)
  local arrival = look == nil and tonumber(redis.call('ZSCORE', q.queue, entry))
  if not arrival then
    arrival = arrive and arrive() or queue_arrival(nil, q.seq)
    redis.call('ZADD', q.queue, 'NX', arrival, entry)
    if look == 'blind' then
      arrival = nil
    end
  end
  local _, lease = queue_parse(entry)
  local deadline = now_ms() + recheck + queue_grace(lease or 0)
  redis.call('ZADD', q.waiters, deadline, entry)
  local last = math.max(tonumber(redis.call('ZRANGE', q.waiters, -1, -1, 'WITHSCORES')[2]), deadline)
  for _, key in ipairs({q.queue, q.waiters, q.seq}) do
    redis.call('PEXPIREAT', key, string.format('%d', last + 1))
  end
  return arrival, last
end

-- The proof of a grant to the place arrival of a waiter with secret, of the
-- kind's fields (numbers; see the top of this file).
local function queue_proof(secret, arrival, ...)
  -- %d: a number concatenated as is may print as 1.7e+15.
  local body = string.format(string.rep(':%d', select('#', ...) + 1), arrival, ...):sub(2)
  return body .. ':' .. redis.sha1hex(secret .. ':' .. body)
end

-- Tells the first QUEUE_CHASE of entries (the waiters now at the head, in
-- order) that a grant just made runs for claimed ms only, so that they
-- re-check when it lapses; only those that planned to re-check later than
-- that, read back from their deadlines, which are brought forward to match.
-- skip (the caller's owner, who learns what holds from its reply) is not
-- told. address(owner, ask) names the channel and the addressee of a notice
-- to a waiter; one addressee is told once. A notice that may not be
-- published is left out.
local function queue_chase(q, now, claimed, entries, skip, publish, address)
  local told = {}
  for i = 1, math.min(#entries, QUEUE_CHASE) do
    local entry = entries[i]
    local owner, lease, _, _, ask = queue_parse(entry)
    local by = owner and now + claimed + queue_grace(lease)
    -- (A lapsed or unknown entry has no deadline beyond by: nobody to tell.)
    if owner and owner ~= skip and tonumber(redis.call('ZSCORE', q.waiters, entry) or by) > by then
      local channel, to = address(owner, ask)
      if lock_may_publish(publish, channel) then
        if not told[to] then
          lock_publish(publish, channel, string.format('@%s ~%d', to, claimed))
          told[to] = true
        end
        redis.call('ZADD', q.waiters, 'XX', by, entry)
      end
    end
  end
end

