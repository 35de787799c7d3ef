// Package pubsub shares a few Redis pub/sub connections among any number of
// goroutines that wait for messages on any number of channels, on a rueidis
// client.
//
// A goroutine that waits for something another process will announce on a
// channel (a job finished, a resource freed) subscribes with
// Multiplexer.Subscribe and gets a Waiter. Subscribe returns only once Redis
// has confirmed the subscription, so an announcement published after that
// point cannot be missed: check the condition after Subscribe, then Wait,
// check again, and Leave when done:
//
//	mux, err := pubsub.New(rueidisClient)
//	if err != nil { ... }
//	defer mux.Close() // before closing rueidisClient
//
//	w, err := mux.Subscribe(ctx, "jobs:42:done")
//	if err != nil { ... }
//	for !jobDone() { // checked after Subscribe: a message sent before it is not replayed
//		if err := w.Wait(ctx); err != nil {
//			w.Leave(false) // gave up: a wake meant for w goes to the next Waiter
//			return err
//		}
//	}
//	w.Leave(true)
//
// Wakes are hints, never facts: a message wakes a Waiter, which then looks at
// the state it waits for (in Redis, say). A Waiter may be woken without
// anything having changed, and messages published while a connection is down
// are lost (Redis pub/sub delivers at most once); after such a gap every
// Waiter of the channel is woken, so that it looks for itself. A waiter that
// must also re-check on a schedule (say, a lease that may run out unannounced)
// selects on C, Done and its own timer instead of calling Wait.
//
// This is the waiting room behind every blocking primitive of this module
// (packages rlock and semaphore); their Clients each have one Multiplexer,
// configured with rlock.WithPubSub.
//
// # Which Waiters a message wakes
//
// A message's payload tells how many of the channel's local Waiters it is for,
// so that one release wakes one waiter instead of a herd:
//
//   - a decimal number is a budget: the Waiters are woken in arrival order
//     while their weights (SubscribeWeighted, 1 for Subscribe) fit in it, and
//     at least one is; a Waiter that does not fit is not overtaken by lighter
//     ones behind it, so heavy requests do not starve;
//   - WakeAll ("*") wakes every Waiter of the channel;
//   - a payload starting with "@" is addressed: it wakes only the Waiters that
//     this module's lock packages tagged with what follows (a Redis-side
//     queue waking its head), never an untagged one: payloads starting with
//     "@" are reserved;
//   - any other payload counts as a budget of 1.
//
// A Waiter with a wake pending (not yet received from C) takes no further
// budget, and a Waiter that leaves unsatisfied (Leave(false): it gave up)
// passes its wake to the next in line, so that a release it was woken for is
// not lost with it.
// Publishers use PUBLISH, or SPUBLISH when the Multiplexer is sharded (see
// PublishCommand).
//
// # Connections and channels
//
//   - Channels are reference counted: the first Waiter subscribes, later ones
//     share the subscription, and after the last one leaves (and a linger,
//     WithLinger, so that a channel used on and off does not churn) the
//     channel goes idle. No UNSUBSCRIBE is ever sent (rueidis can crash on
//     one answered with BUSY): idle channels are dropped by replacing the
//     connection with one subscribed to the live channels only, once idle
//     ones are as many.
//   - When a connection drops, the Multiplexer reconnects with backoff
//     (WithMaxReconnectBackoff), resubscribes every channel and then wakes
//     every Waiter at once. A resubscription that meets a transient Redis
//     error (BUSY, LOADING, NOAUTH while credentials rotate...) is retried
//     until it succeeds; one refused for good (NOPERM) fails only the Waiters
//     of the denied channel, which learn it from Waiter.Err (and Wait).
//   - On a Redis Cluster client with Redis 7 or later (see WithSharding) the
//     channels are subscribed with SSUBSCRIBE, one command per slot, on one
//     connection per master that has Waiters; publishers must then use
//     SPUBLISH (PublishCommand). A subscription counts (and its messages are
//     delivered) only once a keyed read on the same connection shows the node
//     is the slot's master: a replica accepts SSUBSCRIBE for its master's
//     slots and hears what the master publishes, but SPUBLISH counts the
//     master's own subscribers only, so a hand-off heard on a replica would
//     be counted undelivered. When Redis drops a channel because its slot
//     moved (a sunsubscribe push), or a master's connection is lost, the
//     channel's Waiters are woken at once, the channel is subscribed where
//     its slot now lives, and its Waiters are woken again. A shard
//     connection is replaced to let its idle channels go (once they are as
//     many as the live ones) as a classic one is: the live channels are
//     subscribed on the new connection before the old one closes, so nothing
//     published on them is lost; only when that fails (the node hangs or
//     goes) is the old connection dropped as a lost one.
//   - There is no goroutine per Waiter or per channel: one per connection.
//     Stats reports the counts, for metrics.
package pubsub
