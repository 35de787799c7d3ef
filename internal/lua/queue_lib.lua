-- queue_lib: the wait queue of every lock kind (Mutex, RWMutex, semaphore);
-- put after publish_lib.lua at build time (see lua.go), so it declares
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
-- next waiter served. Every kind serves its queue with queue_serve.
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
-- The arrival counter's expiry until queue_enqueue sets its own (see
-- queue_arrival).
local QUEUE_SEQ_FALLBACK_MS = 60000
-- Bounds the waiters one script serves or drops, so that no script runs long.
local QUEUE_SERVE_MAX = 100

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
-- lock_denied); serving: what serving the queue runs (queue_head,
-- queue_dequeue, queue_chase), not what joining it does, for a caller that
-- only serves (each check costs a script about a microsecond on a server
-- that was idle).
local function queue_may(c, q, serving)
  local ok = c('TIME') and c('ZRANGE', q.queue) and c('ZREM', q.queue) and
    c('ZRANGE', q.waiters) and c('ZRANGEBYSCORE', q.waiters) and
    c('ZSCORE', q.waiters) and c('ZADD', q.waiters) and c('ZREM', q.waiters)
  if serving then
    return ok
  end
  ok = ok and c('ZSCORE', q.queue) and c('ZADD', q.queue) and c('ZCARD', q.queue) and
    c('PEXPIREAT', q.queue) and c('PEXPIREAT', q.waiters)
  return ok and (not q.seq or c('SET', q.seq, '1', 'GET') and c('PEXPIREAT', q.seq))
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

local function queue_dequeue(q, entry)
  redis.call('ZREM', q.queue, entry)
  redis.call('ZREM', q.waiters, entry)
end

-- The first entry of the waiters zset with its score ({} when no one waits):
-- a read, which a script may make before its check of what it will write
-- (see lock_denied) to learn whether it has a queue to serve at all.
local function queue_first(q)
  return lock_call('ZRANGE', q.waiters, 0, 0, 'WITHSCORES')
end

-- Returns the head entry after forgetting lapsed waiters (whose process
-- stopped re-checking: their deadline passed), its arrival number
-- and the QUEUE_CHASE entries behind it (the head once it leaves, and so on);
-- nil when no one waits. Costs one command when no one waits (the clock is
-- read only when someone does); none when the caller has read first, the
-- waiters zset's first entry with its score (queue_first).
local function queue_head(q, first)
  first = first or queue_first(q)
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
    -- (SET .. GET: one command per place, as INCR would be. queue_enqueue
    -- sets its expiry; the one given here holds only should the script
    -- fail before that, say on a queue key of the wrong type.)
    before = redis.call('SET', seq, string.format('%d', clock_us), 'PX', QUEUE_SEQ_FALLBACK_MS, 'GET')
  end
  local a = math.max((tonumber(before) or 0) + 1, clock_us)
  if seq and a ~= clock_us then
    redis.call('SET', seq, string.format('%d', a), 'KEEPTTL')
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
  local added = 0
  if not arrival then
    arrival = arrive and arrive() or queue_arrival(nil, q.seq)
    added = redis.call('ZADD', q.queue, 'NX', arrival, entry)
    if look == 'blind' then
      arrival = nil
    end
  end
  local _, lease = queue_parse(entry)
  local deadline = now_ms() + recheck + queue_grace(lease or 0)
  local placed = redis.pcall('ZADD', q.waiters, deadline, entry)
  if type(placed) == 'table' and placed.err then
    -- (A waiters key of the wrong type: the place goes, not left in a
    -- queue with no expiry.)
    if added == 1 then
      redis.call('ZREM', q.queue, entry)
    end
    error(placed)
  end
  local last = math.max(tonumber(redis.call('ZRANGE', q.waiters, -1, -1, 'WITHSCORES')[2]), deadline)
  for _, key in ipairs({q.queue, q.waiters, q.seq}) do
    redis.call('PEXPIREAT', key, string.format('%d', last + 1))
  end
  return arrival, last
end

-- Records a holder of a kind with leases of their own (an RWMutex reader, a
-- semaphore permit, see lease_score): member scored score in the leases
-- zset and count in the counts hash (unless counts is nil: the kind implies
-- the count), as one step. Should the hash refuse (a key of the wrong type),
-- the zset entry it added is taken back and the error raised: no holder left
-- in a zset without the expiry the caller gives it next. (Here, as every
-- kind with such leases also queues.)
local function queue_hold_lease(leases, counts, member, score, count)
  local added = redis.call('ZADD', leases, score, member)
  if not counts then
    return
  end
  local counted = redis.pcall('HSET', counts, member, count)
  if type(counted) == 'table' and counted.err then
    if added == 1 then
      redis.call('ZREM', leases, member)
    end
    error(counted)
  end
end

-- The proof of a grant to the place arrival of a waiter with secret, of the
-- kind's fields (numbers; see the top of this file).
local function queue_proof(secret, arrival, ...)
  -- %d: a number concatenated as is may print as 1.7e+15.
  local body = string.format(string.rep(':%d', select('#', ...) + 1), arrival, ...):sub(2)
  return body .. ':' .. redis.sha1hex(secret .. ':' .. body)
end

-- The channel and addressee of a message to the waiter owner that asks for
-- ask: its Client's grant channel (k.grants: the prefix), or, for a waiter
-- granted together with others (ask is k.tag: an RWMutex reader), the
-- shared channel k.channel, addressed to the tag.
local function queue_address(k, owner, ask)
  if ask == k.tag then
    return k.channel, ask
  end
  return queue_channel(k.grants, owner), owner
end

-- Tells the first QUEUE_CHASE of entries (the waiters now at the head, in
-- order) that a grant just made runs for claimed ms only, so that they
-- re-check when it lapses; only those that planned to re-check later than
-- that, read back from their deadlines, which are brought forward to match.
-- skip (the caller's owner, who learns what holds from its reply) is not
-- told. A notice goes where queue_address(k, ..) says; one addressee is told
-- once. A notice that may not be published is left out.
local function queue_chase(q, now, claimed, entries, skip, publish, k)
  local told = {}
  for i = 1, math.min(#entries, QUEUE_CHASE) do
    local entry = entries[i]
    local owner, lease, _, _, ask = queue_parse(entry)
    local by = owner and now + claimed + queue_grace(lease)
    -- (A lapsed or unknown entry has no deadline beyond by: nobody to tell.)
    if owner and owner ~= skip and tonumber(redis.call('ZSCORE', q.waiters, entry) or by) > by then
      local channel, to = queue_address(k, owner, ask)
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

-- Serves q from its head (direct hand-off): grants each head waiter what it
-- asks for while it fits, and tells it '@' .. addressee .. ' ' .. proofs on
-- its channel (queue_address); a grant no one hears is undone (the waiter's
-- Client is gone) and the next waiter served. k is the kind: its state (the
-- fields queue_address reads among them) and its functions, each called
-- with k first:
--   k.fits(k)                  (nil: always) whether anything may be granted
--                              at all; asked before each look at the queue
--   k.fits(k, owner, ask, lease)  for the head: true to grant it; 'quiet' to
--                              grant it unannounced (the caller's own); false
--                              to stop (it waits); 'never' to drop it and
--                              tell it '@' .. addressee (it can never be
--                              served); nil to drop it silently (not written
--                              by this version, as an entry queue_parse
--                              refuses)
--   k.grant(k, head, arrival, owner, lease, ttl, secret, ask, behind)
--                              makes the grant, the head being dequeued
--                              (behind: the entries after it, as queue_head
--                              returns them), and returns
--                              its proofs, nil when unannounced (serving
--                              stops); for a batch granted together, also
--                              the entries then at the head (as queue_head
--                              returns them) and the shortest claim window
--                              among those announced
--   k.settle(k, heard, owner, ttl)  after the message: undoes the grant when
--                              no one heard it; returns whether to serve on
-- self is the caller's own entry (nil for none), k.self its owner when its
-- entry is not given: serving stops when self is at the head (the caller
-- takes what it asks for itself), and neither is chased. pre, if given, is
-- the head the caller just looked up ({head, arrival, behind}, see
-- queue_head). At most QUEUE_SERVE_MAX waiters are served or dropped. After
-- a grant for a claim window (see Claims), the waiters left at the head are
-- chased (queue_chase).
-- Returns nil when no one is queued (any more), true when self is at the
-- head, false otherwise; and, when the head may not be told of its grant (an
-- ACL refuses its channel), the refusal: nothing is granted to it, and it
-- stays queued and takes the grant when it re-checks. Other messages that may
-- not be published are left out.
local function queue_serve(q, self, publish, k, pre)
  local claimed, refusal, head, arrival, behind, waits -- waits: head stays at the head
  for _ = 1, QUEUE_SERVE_MAX do
    if k.fits and not k.fits(k) then
      break
    end
    if pre then
      head, arrival, behind = unpack(pre)
      pre = nil
    else
      head, arrival, behind = queue_head(q)
    end
    if not head then
      return nil
    elseif head == self then
      return true
    end
    local owner, lease, ttl, secret, ask = queue_parse(head)
    local fit = owner and (not k.fits or k.fits(k, owner, ask, lease))
    local channel, to
    if fit then
      channel, to = queue_address(k, owner, ask)
    end
    if fit == false then
      waits = true
      break
    elseif fit == true and not lock_may_publish(publish, channel) then
      waits, refusal = true, lock_refusal(lock_publish_name(publish), channel,
        'nothing was handed to the waiters queued first, who could not be told of it')
      break
    end
    queue_dequeue(q, head)
    if fit == 'never' then
      if lock_may_publish(publish, channel) then
        lock_publish(publish, channel, '@' .. to)
      end
    elseif fit then
      local proofs, rest, shortest = k.grant(k, head, arrival, owner, lease, ttl, secret, ask, behind)
      if not proofs then
        break
      end
      local heard = lock_publish(publish, channel, '@' .. to .. ' ' .. proofs) > 0
      if rest then
        behind = rest
      else
        shortest = ttl < lease and ttl
      end
      if heard and shortest then
        claimed = math.min(claimed or shortest, shortest)
      end
      if not k.settle(k, heard, owner, ttl) then
        break
      end
    end
  end
  if claimed then
    queue_chase(q, now_ms(), claimed, waits and {head, unpack(behind)} or behind,
      k.self or self and queue_parse(self), publish, k)
  end
  return false, refusal
end
