// Package rlock provides reentrant distributed locks on Redis (Redisson
// style, on rueidis) that wait without polling: a waiter sleeps until the
// holder's release hands it the lock, in arrival order across processes. A
// lock has a lease renewed by a watchdog while it is held, signals its loss by
// cancelling a context, and gives fencing tokens. Package semaphore adds a
// counting semaphore on the same Client.
//
// # Usage
//
// One Client per rueidis client (per process, usually); a Mutex per lock name:
//
//	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	defer rc.Close()
//	c, err := rlock.New(rc) // options: WithKeyPrefix, WithWatchdogTimeout, ...
//	if err != nil { ... }
//	defer c.Close() // runs before rc.Close, which the Client uses until then
//
//	m := c.Mutex("orders:42")
//	lockCtx, err := m.Lock(ctx) // ctx bounds the wait only; see WithWaitTimeout
//	if err != nil { ... }
//	defer m.Unlock(lockCtx) // the lock context, not ctx: it carries the hold
//	// ... the critical section, doing the guarded work with lockCtx ...
//
// Ownership is carried by the returned lock context, not by the goroutine:
// pass lockCtx to Unlock, to Token and HoldCount, and to Lock to re-enter. A
// context that does not carry the hold (ctx itself, say) is another owner,
// even in the same goroutine: Lock(ctx) after Lock(ctx) waits for the first
// hold to end, and when it fails with ErrLocked the error says that this
// Client holds the lock through another lock context. The lock context is cancelled when the hold
// ends: with cause ErrUnlocked by the final Unlock, and ErrLeaseLost when the
// lock was lost without Unlock (see below), so work done with lockCtx stops
// when the lock stops protecting it.
//
// Every blocking call has a non-blocking twin that makes one attempt:
// TryLock fails at once with an error matching ErrLocked when another owner
// holds the lock (Lock with WithWaitTimeout(0) does the same, as Redisson's
// tryLock with a wait time of 0). Per-call options bound the wait
// (WithWaitTimeout, which does not bound the hold) or give the hold a fixed
// lease instead of the watchdog's renewals (WithLease):
//
//	lockCtx, err := m.TryLock(ctx)
//	if errors.Is(err, rlock.ErrLocked) { ... another owner holds it ... }
//
//	lockCtx, err := m.Lock(ctx, rlock.WithWaitTimeout(5*time.Second), rlock.WithLease(time.Minute))
//
// The lock is held as a Redis hash <prefix>:{name} mapping owner ids (the
// Client's UUID and a per-hold id) to hold counts; all changes are made by
// Lua scripts, so only the owner can release it. Besides Mutex, a Client
// gives read/write locks (RWMutex), strictly fair locks (FairMutex), and
// locks on several names at once (MultiLock); NewQuorum gives Redlock-style
// locks over independent masters.
//
// # Lock context
//
// The ctx given to Lock bounds the wait only. The lock context Lock returns
// keeps ctx's values but not its cancellation or deadline
// (context.WithoutCancel), and is cancelled exactly when this hold ends: by its
// final Unlock (cause ErrUnlocked), or when it is lost (a cause matching
// ErrLeaseLost: the key vanished, renewals failed until the lease ran out, a
// WithLease lease ended, the Client was closed). So a holder can always tell
// whether it still holds the lock, from lockCtx.Err and context.Cause,
// whatever became of its own ctx; and a shutdown that cancels ctx (SIGINT, a
// finished request) does not cut the critical section short: it finishes
// with lockCtx and unlocks cleanly (see the graceful shutdown example). Work
// that must also stop on shutdown watches ctx as well. The same holds for
// every lock kind (RWMutex, MultiLock, QuorumMutex) and for semaphore permits.
//
// etcd's concurrency.Mutex makes the same choice for ctx, which bounds only the
// Lock call, but tells of a lost lock on a separate channel (Session.Done);
// here the lock context is that signal, and a context to hand the guarded
// work. rueidislock ends the hold with ctx instead, which releases the lock
// under a shutdown's feet, and leaves a holder whose ctx was cancelled unable
// to tell whether it still holds.
//
// A lock taken with another lock's context (B with lockA, nested) carries
// both holds, and each lock context ends with its own hold only: Unlock of A
// cancels lockA, never lockB, and a cause always names the hold that ended.
//
// Re-entry goes with the context, not the goroutine: every goroutine given
// lockCtx, or a context derived from it (context.WithCancel, WithTimeout,
// WithValue...), holds the lock through it, and its Lock of the same lock
// re-enters at once. So goroutines that must exclude one another do not
// Lock with a lock context handed to them: four such goroutines are all
// inside at once, the hold count at 5. Each Locks with a context that does
// not carry the hold (ctx, or one derived from ctx) and waits its turn like
// any other owner (see the goroutines example of Mutex.Lock). No context
// derived from lockCtx sheds the hold; one that ends with the hold without
// carrying it is made from ctx, cancelled by context.AfterFunc(lockCtx, ...).
//
// Pass lockCtx, not ctx, to Unlock: ctx carries no hold, so Unlock(ctx) fails
// with an ErrNotHeld that says which context to pass (or, when ctx holds the
// lock through another Client, that Client's). A deferred Unlock discards
// that error; so that the mistake does not keep the lock held and renewed
// until the process exits, a watchdog hold whose lock context the program
// drops without Unlock is released once that context, and every context
// derived from it, is unreachable: a cleanup (runtime.AddCleanup) has the
// Client release it in the background, bounded by the unlock timeout, and log
// a warning (WithLogger; slog.Default() by default). It is a safety net, not
// a way to unlock: it waits for a garbage collection to find the context
// unreachable, and a derived context still live (a context.WithCancel child
// never cancelled, a context.AfterFunc never stopped) keeps the hold. A hold
// with a fixed lease (WithLease) ends by itself, so dropping its lock context
// is no mistake: it is left to its lease ("at most once per lease": take the
// lock with a lease and let it expire), and the Client forgets it then.
//
// # Leases, the watchdog and lease loss
//
// Every hold has a lease, after which Redis deletes the key. By default the
// lease is the Client's watchdog timeout (30s) and a watchdog goroutine renews
// all holds of the Client every third of it, in batched script calls, until the
// final Unlock. WithLease gives a hold a fixed lease instead.
//
// When a hold ends without Unlock, its lock context is cancelled with cause
// ErrLeaseLost: when a renewal finds the key gone; when renewals have failed
// until the last confirmed lease would have run out (measured from the moment
// the renewal was sent on the monotonic clock, less a drift margin of 1% + 2ms,
// so the holder learns no later than Redis expires the key); when a WithLease
// lease runs out; and when the Client is closed. A worker that loops under a
// lock does each step with lockCtx, stops when it ends, and tells a loss from
// its own cancellation by context.Cause(lockCtx) (see the worker example of
// Mutex.Lock): after ErrLeaseLost another owner may hold the lock, so it locks
// again before carrying on, with a higher fencing token.
//
// Closing the Client frees its holds: Close cancels their lock contexts, then
// releases them in Redis and hands them to the next waiters, as Unlock would
// (see Client.Close). A holder that crashes, or whose Close cannot reach
// Redis, frees nothing: its locks stay held until their lease runs out, the
// watchdog timeout (30s by default) after the last renewal. Where that is too
// long, shorten it with WithWatchdogTimeout (the watchdog renews every third
// of it, so a shorter timeout costs more renewals).
//
// # Safety: what a lease does not guarantee
//
// A lock lease is an efficiency device, not a correctness guarantee. A holder
// paused longer than its lease (garbage collection, a stopped VM, a slow
// network) keeps running after Redis has given the lock to someone else, and
// only learns of it afterwards. Redis also expires keys by its wall clock, so a
// clock jump on the server can end leases early, and replication is
// asynchronous, so a failover can lose a lock that was just taken.
//
// Where two holders at once would corrupt data, use the fencing token: Token
// returns a number that grows strictly with every acquisition of the lock.
// Send it with every write to the protected resource, and have the resource
// reject a write whose token is lower than the highest it has seen:
//
//	tok, _ := m.Token(lockCtx)
//	// in the resource, atomically: if tok < lastToken { reject }; lastToken = tok; apply
//
// Without fencing, the lock still keeps contending workers from duplicating
// effort almost always; with fencing, stale holders cannot do harm.
//
// # What stays in Redis
//
// Nothing of a lock is permanent: a service may lock "orders:<id>" for
// millions of ids. Every key of a Mutex, FairMutex, MultiLock member or
// RWMutex expires by itself once the lock is idle, even when the processes
// that used it crashed: the lock key with its hold's lease (at once on
// Unlock); the fencing counter one lease of the hold that took its last
// token (1s at least) after that token; the queue and arrival counter when
// the last waiter's place lapses, max(its lease, 2s) after the re-check it
// planned, which is at most 4/5 of a watchdog timeout away (a Mutex and an
// RWMutex waiter alike); a release's retry latch the unlock timeout plus 1s
// after it, a tombstone of a given-up acquisition one lease after it. With the defaults
// no key is left a minute after the last hold ended and the last waiter
// stopped (WithLease holds: 24s plus the longest lease, when longer).
//
// Fencing tokens still rise strictly across that expiry: a counter made
// afresh starts from the server clock in microseconds, and the counter is
// kept until the clock has passed its value, which it runs ahead of only
// while tokens are reserved faster than one per microsecond (a contended
// acquisition reserves 65). docs/guarantees.md in the repository gives the
// argument and what it assumes of the server clock.
//
// # Errors
//
// Errors wrap the sentinel values of this package (ErrLocked, ErrNotHeld,
// ErrLeaseLost, ErrUpgrade, ErrInvalidName, ErrInvalidLease, ErrClosed, ...)
// and Redis or context errors; test them with errors.Is.
//
// # Read/write locks
//
// Client.RWMutex returns a reentrant reader/writer lock with writer
// preference, a lease per reader, downgrade and fencing tokens for writers;
// see RWMutex.
//
// # Strict FIFO
//
// Cohorts and turns trade strict order for throughput: a Client's goroutines
// are served together, ahead of goroutines of other Clients that queued
// before some of them. Where every Lock call must be served in arrival order
// across every goroutine of every process (Redisson's RFairLock), use
// Client.FairMutex, or WithFIFO for every Mutex of a Client: each Lock call
// then queues in Redis under its own owner id, no hold is passed on or kept
// inside a Client, and the order of the Redis queue is the order of
// acquisition. Each hold then costs a hand-off through Redis (one script and
// one message), which a cohort spares most holds.
//
// # Several locks at once
//
// Client.MultiLock takes a set of locks all or nothing, in one order (the
// sorted names) so that overlapping sets never deadlock, waiting on the lock
// that blocked it as a Mutex does; see MultiLock for how order and
// atomicity are kept when the locks live in different cluster slots.
//
// # Quorum locks (Redlock), and why a single primary is usually better
//
// NewQuorum takes one rueidis client per independent Redis master and gives
// quorum locks (Quorum.Mutex): a lock is held while a majority of the N
// masters (N/2+1) hold it for the same owner, so it keeps working while a
// minority of them are down, which a lock on one Redis, or on a primary with
// asynchronous replicas, cannot promise. Lock asks every master at once,
// keeps the lock only if a majority granted it with validity left (the lease,
// less the time the round took since each request was sent on the monotonic
// clock, less a drift margin of 1% + 2ms), and otherwise gives back what it
// took at once; it waits on every master's unlock channel without polling,
// and Unlock releases every master. Its limits are those of Redlock, debated
// by Martin Kleppmann and antirez: its safety assumes bounded process pauses,
// bounded network delays and clocks that drift little (a master whose clock
// jumps ahead expires a lock early), and masters that do not forget what they
// granted (a master restarted without fsync'd persistence must stay out for
// one lease). It has no fencing token: no single counter orders the
// acquisitions of a quorum, and the largest of the masters' counters stops
// being one when a master loses its counter, the very failure a quorum is
// meant to survive. Redisson has deprecated its RedLock for these reasons.
// Where two holders at once would corrupt data, use a Mutex on a single
// primary and check its fencing token in the resource; use a quorum lock
// where the lock must survive the loss of a master and a rare second holder
// only costs duplicate work. The Quorum type documents the details.
//
// # How it works: waiting, hand-off and cohorts
//
// A waiting Lock call subscribes to its Client's grant channel for the lock
// and sleeps until a release addresses the lock to it there, instead of
// retrying SET NX in a sleep loop. All waiting goroutines of a Client share a
// few pub/sub connections (package pubsub).
//
// Contended waiters queue in Redis in arrival order, across all processes,
// one entry per Client (see below). The release that frees the lock hands it,
// in the same script, to the waiter at the head of the queue (for that
// waiter's claim window, see below, and with a block of fencing tokens) and
// tells it so on the
// waiter's Client's own channel: the woken waiter holds the lock without
// another round trip, a hand-off costs one message delivered to one process
// however many wait, and no one can be starved by others that happen to retry
// sooner. The message proves itself with a secret of the waiter's queue entry,
// so a publisher on the channel can wake a waiter but grant it nothing, nor
// take away a hand-off the waiter has not read yet, nor make it re-check later
// than it planned. (Only an uncontended Lock, finding the lock free and no one queued,
// takes it at once.) Every wait is also bounded by the holder's remaining
// lease, so a lost message costs at most one lease (the waiter's re-check then
// finds the lock already its own, or, when that re-check comes after the
// grant's claim window lapsed, finds it gone on to the next waiter and queues
// again, at the back), and after a pub/sub reconnect every waiter re-checks at
// once. A waiter that gives up after the lock was handed to it
// gives it on to the next. A queued waiter re-checks at least every 4/5 of the
// watchdog timeout to keep its place (behind a renewed hold, about every
// 20-30s by default). A waiter whose process died (Redis closed its
// connections) is skipped when the lock reaches it: no one hears the hand-off,
// so the script takes it back and serves the next waiter at once. One whose
// process hangs with its connections open keeps its place until max(its
// lease, 2s) after the re-check it planned; if the lock reaches it first, it holds it for its claim window
// only (WithClaimWindow, 3s by default): a hand-off grants the lock for that
// long, the grantee's Client extends it to the lease with an early renewal
// about a third of the window later (batched with others; a hold released
// before then costs nothing more), and the two waiters queued next are told
// to re-check when the window lapses (so two hung waiters in a row hold the
// queue up for two windows). Until the extension lands, the hold's
// validity is the claim window dated from the waiter's last check, and a
// claim that lapses ends it with ErrLeaseLost. A WithLease hold confirms a
// hand-off with one round trip on receipt, which sets its whole lease. (A live waiter whose pub/sub connection is down just then also
// loses its place, and queues again when it re-checks after reconnecting.)
//
// The waiting goroutines of one Client form a cohort (lock cohorting): the
// oldest of them, the leader, queues in Redis for all of them, the others wait
// in the Client in arrival order. A watchdog hold that unlocks while others of
// its Client wait passes the lock to the oldest of them without a round trip:
// the new hold takes over the Redis owner field, its lease and renewals, and
// the next of the reserved fencing tokens, so tokens still rise strictly from
// holder to holder. A budget bounds a Client's turn: 8 passes (within a second
// of taking the lock from Redis), or as many as fit in 2ms when critical
// sections are short (at most 64). The release that ends the turn hands the
// lock to the head of the Redis queue and queues the Client's next leader at
// the tail in the same script, so Clients take turns in arrival order. When
// no other Client is queued the script keeps the lock for the Client instead,
// with new tokens: a busy Client pays one script per turn. Holds with
// WithLease take no part, and TryLock only takes a lock kept for a turn.
//
// # How it works: turns for single-goroutine workers
//
// A fleet of worker processes with one goroutine each has no local waiter at
// Unlock: its next Lock comes a moment later. So that such a fleet also pays
// the cross-process hand-off once per turn rather than once per hold, the
// final Unlock of a contended lock (other Clients queued in Redis when this
// Client took it) keeps it for the Client for up to the linger (WithLinger,
// 1ms by default) while the turn's budget lasts: a Lock of the Client within
// that time takes it with no round trip, as a local waiter would. Otherwise
// the lock is then released in Redis to the next Client, and the Client stops
// lingering on that lock until its Lock calls come that soon again. Once the
// Client has seen how soon its Lock calls come back, a linger lasts 8 times
// the longest recent gap, at least a quarter of WithLinger's (see
// WithLinger), so a worker that stops costs the others little more than its
// own pace. Unlock
// returns at once either way; a release made after the linger that fails
// leaves the lock to expire with its lease, and Close releases a kept lock at
// once. Processes still take turns in arrival order; what a turn costs the
// others is its holds, and at most one linger: with N Clients waiting, a
// waiter's wait is bounded by about N turns of at most 8 holds (or 2ms of
// short ones) plus a hand-off and a linger each.
package rlock
