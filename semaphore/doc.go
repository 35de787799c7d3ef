// Package semaphore provides a distributed counting semaphore on Redis whose
// permits cannot leak.
//
// A plain counter semaphore loses permits for good when a holder crashes.
// Here every acquisition is a lease: its permits carry an id and an expiry in
// Redis, the Client's watchdog renews them while they are held (or a fixed
// lease ends them), and expired permits go back to the pool on the next call
// that looks. A holder whose lease is lost sees its permit context cancelled
// with cause ErrLeaseLost, as with rlock.Mutex. As there, the context given to
// Acquire bounds the wait only: the permit context keeps its values, not its
// cancellation, and ends exactly when the permits do (Release, or a lost
// lease), so a shutdown that cancels the caller's context can still finish
// the guarded work and Release; permits renewed by the watchdog whose permit
// context is dropped without Release are released, with a log line, once it
// is garbage, and permits with a fixed lease (WithLease) are left to it (see
// Lock context in the rlock documentation).
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
// different limits, the one in Redis wins. A changed WithLimit therefore takes
// effect once the limit is missing again (the state expired while idle, or
// Redis lost it); SetLimit applies a new limit at once. TrySetLimit never
// changes a limit that is set.
//
// Every key of a semaphore expires by itself once nothing is held or queued,
// even when the processes that used it crashed: the permits a second after
// their last lease runs out, the queue when the last waiter's place lapses
// (one watchdog timeout of its Client after its last re-check, or 3s when that
// is longer; see below), and the state (limit, used permits, arrival counter)
// a few seconds after both (up to a minute more when a longer lease was
// released early: expiries are moved only when they must, not on every call). With no process alive, nothing is left
// after the longest lease or watchdog timeout plus a few seconds.
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
// than going to smaller requests behind it.)
//
// Permits are handed over directly. The script that frees permits (a Release,
// a waiter giving up, a raised limit, an acquisition that finds leases run
// out) grants them in the same step to the waiters at the head of the queue
// that fit: each holds its permits from that moment, for its claim window
// (rlock.WithClaimWindow, 3s by default, or its lease when shorter), and is
// told so by one message on its own Client's grant channel; the Client
// extends the permits to their lease with an early renewal, batched with the
// watchdog's others, about a third of the window later (a WithLease
// acquisition confirms the grant with one round trip on receipt instead). A release thus
// reaches one process whatever the number of processes waiting, and the
// waiter holds the permits without another round trip. The message proves
// itself with a MAC keyed by a random secret that only the waiter (and readers
// of the semaphore's keys) know, over the number of the waiter's place in the
// queue: anyone may publish on the channel, but a forged or garbled message
// grants nothing, nor does a recorded grant published again (the waiter takes
// only a grant to the place its last check reported, and a waiter that queues
// again gets a new one); at most it wakes the waiter, which then asks Redis.
// No message displaces a proven grant the waiter has not read yet, or makes
// it re-check later than it planned.
//
// A grant that reaches no subscriber means the waiter's process is gone: the
// waiter is dropped from the queue and the next one served in the same step,
// so a dead waiter holds nobody up. (A waiter whose Client's pub/sub
// connection is down at that moment is dropped the same way; it queues again,
// at the back, when it re-checks after the reconnect.) A grant message that is
// lost on the way costs at most a wait for the waiter's next re-check, which
// finds the permits granted: a waiter re-checks when the earliest held permit
// expires (as its last check saw it), after a pub/sub reconnect, and at least
// every third of the watchdog timeout. That also keeps its place in the
// queue: a waiter that stops re-checking (its process paused, or cut off from
// Redis while its connections stay open) loses its place within one watchdog
// timeout (3s when that is longer; a WithLease waiter two thirds of its lease,
// 2s at least, after the re-check it planned) or, when permits reach it
// first, holds them for its claim window only: the two waiters left at the
// head behind such a grant re-check when the window lapses (so two hung
// waiters in a row hold the queue up for two windows), and the hung waiter's
// permit context ends with ErrLeaseLost when it runs again. Those waiters
// planned to re-check by then when they queued behind permits granted for a
// claim window (as workers taking turns do); only one that queued behind a
// longer lease is told so, by one more message each, so that a hand-off
// between such workers costs one message.
//
// A blocking Acquire whose Client waits on the semaphore already, or did
// within the pub/sub linger (WithPubSub, 250ms by default: the semaphore is
// contended), takes the permits or queues in a single script; otherwise it
// first tries once without queueing, so that an uncontended Acquire costs one
// script and no subscription. A Release is one script, and an acquisition by
// hand-off costs the waiter no script at all (nor does a pass within a turn:
// see Turns).
//
// # Turns (one-permit semaphores)
//
// A semaphore whose limit is configured as one (NewLock, or New with
// WithLimit(1)) takes turns between Clients as rlock.Mutex does. The
// goroutines of one Client that Acquire one permit with the watchdog's lease
// queue in Redis as one: the oldest, the leader, acquires or queues there for
// the Client, the others wait in the Client in arrival order. A Release while
// another goroutine of the Client waits passes the lease (its permit id, its
// validity, and the watchdog's renewals) to the oldest of them, with no round
// trip: the permit context of the releaser ends as after a release, and the
// new holder's Release, or its pass, ends the lease. Passes are made within a
// turn budget, the Mutex's: 8 within a second of the acquisition in Redis, or
// up to 64 within 2ms; then the Release goes to Redis, which grants the permit
// to the head of its queue and, in the same script, queues the oldest waiter
// of the Client at the tail (when no one else is queued, the lease stays with
// the Client and is passed on): Clients are served in arrival order, one turn
// each. A lease is passed
// only while nothing puts it in doubt: the Client saw no connection error
// since the command that last confirmed it, and at least half of it is left.
// A lease lost in Redis without the Client knowing (its key deleted, say) is
// found by the watchdog's next renewal, which ends the hold: it is passed to
// no one, its Release reports the loss, and the waiters acquire in Redis.
//
// A last Release with no local waiter, when the Client had to queue for the
// permit (others were then holding or waiting), keeps the lease for up to the
// linger for the Client's next Acquire, within the same budget: a worker that
// acquires again at once takes it with no round trip; when the linger runs
// out unused, the permit is released in Redis, and the Client stops lingering
// on that semaphore until an Acquire comes within the linger of a release
// again. The linger follows how soon the Client's Acquire calls came back, as
// the Mutex's does (see rlock.WithLinger). Close releases a lease kept so at
// once. When a turn ends in Redis after the Client's Acquire calls came back
// within the linger, its Release also queues a place for the Client's next
// Acquire behind the waiter it serves, as the Mutex's Unlock does: that
// Acquire takes the place with no script of its own, and a place no Acquire
// takes within the linger is given up (one more script). The linger is the Client's
// (core.Config.Linger, meant to follow rlock.WithLinger); while it is zero,
// nothing is kept.
//
// With a limit set otherwise (TrySetLimit, SetLimit, or another WithLimit),
// or for WithLease acquisitions, every acquisition goes to Redis. Where a
// limit of one configured here meets a higher limit in Redis, a goroutine may
// wait in its Client for a holder of its Client's turn although a permit is
// free, for at most one hold.
//
// The limit can be changed at run time with SetLimit: raising it hands the
// new permits to the waiters at the head; lowering it lets current holders
// finish, new acquisitions wait until enough permits are released, and a
// waiter that asks for more than the new limit fails with ErrExceedsLimit.
//
// # Safety
//
// As with any lease, a holder paused past its lease may run on after its
// permits went to someone else. Where that matters, check the permit context
// before acting, and keep leases well above pause times.
package semaphore
