// Package semaphore provides a distributed counting semaphore on Redis whose
// permits cannot leak.
//
// A plain counter semaphore loses permits for good when a holder crashes.
// Here every acquisition is a lease: its permits carry an id and an expiry in
// Redis, the Client's watchdog renews them while they are held (or a fixed
// lease ends them), and expired permits go back to the pool on the next call
// that looks. A holder whose lease is lost sees its permit context cancelled
// with cause ErrLeaseLost, as with rlock.Mutex.
//
// A Semaphore is built on an rlock.Client and shares its owner id, pub/sub
// multiplexer, watchdog and key prefix:
//
//	s := semaphore.New(client, "gpu-pool", semaphore.WithLimit(4))
//	permitCtx, err := s.Acquire(ctx, 1)
//	if err != nil { ... }
//	defer s.Release(permitCtx)
//
// # The limit, and what stays in Redis
//
// The limit lives in Redis. With WithLimit, every acquisition (and State)
// establishes it when it is missing: on first use, after a Redis restart
// without persistence, or after the semaphore's keys expired while it was
// idle. It never changes a limit already there: when processes configure
// different limits, the one in Redis wins.
//
// Every key of a semaphore expires by itself once nothing is held or queued,
// even when the processes that used it crashed: the permits when their last
// lease runs out, the queue when the last waiter's place lapses (one watchdog
// timeout of its Client after its last re-check), and the state (limit, used
// permits, arrival counter) one second after both. With no process alive,
// nothing is left after the longest lease or watchdog timeout plus a second.
//
// A limit set by TrySetLimit or SetLimit cannot be re-established that way, so
// either of them makes the state permanent: it holds the limit for good
// (overriding WithLimit), and only the permits and the queue expire.
//
// # Waiting and fairness
//
// Waiters queue in Redis in arrival order, across all processes, and are
// served strictly in that order: a request for many permits is never overtaken
// by smaller requests that arrive after it, so it cannot starve. (The price:
// while the request at the head does not fit, permits stay free for it rather
// than going to smaller requests behind it.) A release wakes the waiter at the
// head of the queue by name over pub/sub, and an acquisition that leaves
// permits free wakes the next one, so a release of k permits wakes just as
// many waiters as can proceed and no herd forms. A waiter also re-checks when
// the earliest held permit expires, after a pub/sub reconnect, and at least
// every third of the watchdog timeout, which keeps its place in the queue: a
// waiter that stops doing so (its process died) loses its place after one
// watchdog timeout.
//
// The limit can be changed at run time with SetLimit: raising it wakes waiters;
// lowering it lets current holders finish, and new acquisitions wait until
// enough permits are released.
//
// # Safety
//
// As with any lease, a holder paused past its lease may run on after its
// permits went to someone else. Where that matters, check the permit context
// before acting, and keep leases well above pause times.
package semaphore
