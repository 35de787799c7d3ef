-- spin_release: release a plain SET NX PX lock only if it still holds our
-- token, so that a holder whose lease ran out cannot delete its successor's
-- lock. Used by the spin-lock baseline that the demo and the bench compare
-- against, never by the library's own locks.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token this holder wrote with SET NX
--
-- Returns 1 when the key was ours and is deleted, 0 when it was not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
