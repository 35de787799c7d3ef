package pubsub

import "github.com/relockio/relock/internal/mux"

// The values are internal/mux's, which returns them: the lock packages, which
// use it directly, and users of this package see the same errors.

var (
	// ErrClosed is returned by Subscribe after Close, and reported by
	// Waiter.Err; also, with a message saying so, by the methods of a
	// Multiplexer or Waiter not made by New or Subscribe (a zero value).
	ErrClosed = mux.ErrClosed
	// ErrInvalidChannel is returned for an empty channel name.
	ErrInvalidChannel = mux.ErrInvalidChannel
	// ErrSubscriptionRefused wraps the Redis error (NOPERM for a channel the
	// ACL denies, say) with which Redis refused a channel's subscription for
	// good. Subscribe returns it, and Waiter.Err reports it to the Waiters of
	// a channel whose resubscription was refused.
	ErrSubscriptionRefused = mux.ErrSubscriptionRefused
	// ErrInvalidOption reports an argument that cannot be used: a nil
	// context (Subscribe, SubscribeWeighted, Sharded, Waiter.Wait), a nil
	// client, an option value out of range (see the With* options), or
	// ShardingSharded on a client that is not a cluster's. Nothing was done.
	ErrInvalidOption = mux.ErrInvalidOption
)
