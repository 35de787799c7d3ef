// Package pubsub shares a few Redis pub/sub connections among any number of
// goroutines that wait for messages on any number of channels.
//
// A Multiplexer is the waiting room behind every blocking primitive of this
// module. A goroutine that must wait for a lock calls Subscribe with the lock's
// channel and gets a Waiter; Subscribe returns only once Redis has confirmed the
// subscription, so a release published after that point cannot be missed. The
// goroutine then re-checks the lock and, while it stays unavailable, blocks on
// Waiter.C alongside its own timer and context.
//
// Properties the lock packages rely on:
//
//   - Channels are reference counted: the first Waiter subscribes, later ones
//     share the subscription, and after the last one leaves (and a short linger,
//     so a lock that is contended on and off does not churn) the channel goes
//     idle. No UNSUBSCRIBE is ever sent (rueidis can crash on one answered with
//     BUSY): idle channels are dropped by replacing the connection with one
//     subscribed to the live channels only, once idle ones are as many.
//   - A message wakes only as many local Waiters as it has work for, oldest
//     first: the payload is a decimal budget (the permits or holds freed), and
//     Waiters are woken in arrival order while their weights fit in it, at least
//     one. The payload WakeAll wakes every Waiter of the channel, and
//     AddressPrefix + tag wakes only the Waiter tagged so (Waiter.SetTag), in
//     whichever process it lives: a Redis-side queue uses it to wake its head.
//     An addressed payload may carry data after AddressDataSeparator, which the
//     Waiter reads with TakeData: how a queue hands over the resource itself.
//   - When a connection drops, the Multiplexer reconnects with backoff,
//     resubscribes every channel and then wakes every Waiter at once, because
//     messages published during the gap are lost (pub/sub delivery is at most
//     once). A resubscription that meets a transient Redis error (BUSY,
//     LOADING, NOAUTH while credentials rotate...) is retried until it
//     succeeds; one refused for good (NOPERM) fails only the Waiters of the
//     denied channel, which learn it from Waiter.Err.
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
//     its slot now lives, and its Waiters are woken again.
//   - There is no goroutine per Waiter or per channel: one per connection.
package pubsub
