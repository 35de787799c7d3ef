-- probe: checks, without running them, that the current ACL user may run every
-- command the Mutex and semaphore scripts and clients run, on their keys and
-- channels (redis.acl_check_cmd, Redis 7+), and that the server takes writes.
-- Changes no key.
--
-- KEYS[1..n] representative keys under the Client's prefix (a Mutex's lock key
--            and a semaphore's state key); KEYS[1] .. ':probe' is never set,
--            so deleting it writes nothing
-- ARGV[1]    "classic" or "sharded": the pub/sub commands the Client uses
--            (PUBLISH, SUBSCRIBE, UNSUBSCRIBE or their sharded forms)
-- ARGV[2]    "1" to check WAIT too (acquisitions wait for replicas)
-- ARGV[3..m] representative channels (a Mutex's and a semaphore's)
--
-- Returns the names of the denied commands, without duplicates: {} when every
-- command is allowed, or when the server cannot tell (no acl_check_cmd); or
-- {'-replica'} when the server refuses writes as a read-only replica (a
-- client that sends every command to replicas: nothing could be locked).
-- The names end with '-functions' when the user may not run the scripts as
-- Redis functions (FCALL, FUNCTION LOAD), which the Client then does not
-- try: it runs them by EVALSHA (see functions.go); not a denial.
local w = redis.pcall('DEL', KEYS[1] .. ':probe')
if type(w) == 'table' and w.err and string.sub(w.err, 1, 8) == 'READONLY' then
  return {'-replica'}
end
if not redis.acl_check_cmd then
  return {}
end

-- Each command with arguments shaped as the scripts send them; 'K' stands for
-- each key in turn.
local keyed = {
  {'DEL', 'K'}, {'EXISTS', 'K'}, {'GET', 'K'}, {'SET', 'K', '1', 'PX', '1'},
  {'INCR', 'K'}, {'INCRBY', 'K', '1'}, {'PEXPIRE', 'K', '1'}, {'PTTL', 'K'},
  {'HDEL', 'K', 'f'}, {'HEXISTS', 'K', 'f'}, {'HGET', 'K', 'f'}, {'HMGET', 'K', 'f'},
  {'HINCRBY', 'K', 'f', '1'}, {'HKEYS', 'K'}, {'HSET', 'K', 'f', '1'}, {'PEXPIREAT', 'K', '1'},
  {'PERSIST', 'K'},
  {'ZADD', 'K', '1', 'm'}, {'ZCARD', 'K'}, {'ZRANGE', 'K', '0', '0'},
  {'ZRANGEBYSCORE', 'K', '0', '0'}, {'ZREM', 'K', 'm'}, {'ZSCORE', 'K', 'm'},
  {'EVAL', 'return 0', '1', 'K'},
  {'EVALSHA', '0000000000000000000000000000000000000000', '1', 'K'},
}
-- 'C' stands for each channel in turn.
local channeled = {
  {'PUBLISH', 'C', 'm'}, {'SUBSCRIBE', 'C'}, {'UNSUBSCRIBE', 'C'},
}
if ARGV[1] == 'sharded' then
  channeled = {
    {'SPUBLISH', 'C', 'm'}, {'SSUBSCRIBE', 'C'}, {'SUNSUBSCRIBE', 'C'},
  }
end
local channels = {}
for i = 3, #ARGV do
  channels[#channels + 1] = ARGV[i]
end

local denied, seen = {}, {}
local function check(cmd, args)
  if seen[cmd] then
    return
  end
  -- pcall: a command this server does not know is not a denial.
  local ok, allowed = pcall(redis.acl_check_cmd, cmd, unpack(args))
  if ok and not allowed then
    seen[cmd] = true
    denied[#denied + 1] = cmd
  end
end

local function each(list, marker, values)
  for _, spec in ipairs(list) do
    for _, v in ipairs(values) do
      local args = {}
      for i = 2, #spec do
        args[i - 1] = spec[i] == marker and v or spec[i]
      end
      check(spec[1], args)
    end
  end
end

check('TIME', {})
if ARGV[2] == '1' then
  check('WAIT', {'1', '1'})
end
each(keyed, 'K', KEYS)
each(channeled, 'C', channels)
local fcall_ok, fcall = pcall(redis.acl_check_cmd, 'FCALL', 'f', '1', KEYS[1])
local load_ok, load = pcall(redis.acl_check_cmd, 'FUNCTION', 'LOAD', 'code')
if not (fcall_ok and fcall and load_ok and load) then
  denied[#denied + 1] = '-functions'
end
return denied
