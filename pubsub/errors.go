package pubsub

import "errors"

var (
	// ErrClosed is returned by Subscribe after Close, and reported by Waiter.Err.
	ErrClosed = errors.New("pubsub: multiplexer closed")
	// ErrInvalidChannel is returned for an empty channel name.
	ErrInvalidChannel = errors.New("pubsub: invalid channel")
)
