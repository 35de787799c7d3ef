-- publish_lib: how every lock script announces a release or a grant; prepended
-- to mutex_lib.lua and sem_lib.lua at build time (see lua.go). It declares a
-- function only and touches no key.
--
-- lock_publish(cmd, channel, message) publishes message on channel and
-- returns how many subscribers received it. cmd is what the Client passed:
--   'PUBLISH'   classic pub/sub on one Redis (standalone, Sentinel): the
--               count is every subscriber of the channel;
--   'SPUBLISH'  sharded pub/sub in a cluster: the count is the subscribers of
--               the shard, which is where every waiter of the lock listens;
--   'PUBLISH?'  classic pub/sub in a cluster: Redis counts only the node that
--               runs the script, though the message reaches every node over
--               the cluster bus, so the count says nothing about a waiter
--               subscribed elsewhere. It is published with PUBLISH and
--               reported as 1 (someone may listen): a script must never take a
--               waiter for gone on that count, and hand its grant to the next.
local function lock_publish(cmd, channel, message)
  if cmd == 'PUBLISH?' then
    redis.call('PUBLISH', channel, message)
    return 1
  end
  return redis.call(cmd, channel, message)
end

