package pubsub

import "errors"

var (
	// ErrClosed is returned by Subscribe after Close, and reported by Waiter.Err.
	ErrClosed = errors.New("pubsub: multiplexer closed")
	// ErrInvalidChannel is returned for an empty channel name.
	ErrInvalidChannel = errors.New("pubsub: invalid channel")
	// ErrSubscriptionRefused wraps the Redis error (NOPERM for a channel the
	// ACL denies, say) with which Redis refused a channel's subscription for
	// good. Subscribe returns it, and Waiter.Err reports it to the Waiters of
	// a channel whose resubscription was refused.
	ErrSubscriptionRefused = errors.New("pubsub: subscription refused")
)
