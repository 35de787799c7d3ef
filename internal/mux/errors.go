package mux

import "errors"

// The errors of package pubsub, which re-exports them: see it for what each
// means.
var (
	ErrClosed              = errors.New("pubsub: multiplexer closed")
	ErrInvalidChannel      = errors.New("pubsub: invalid channel")
	ErrSubscriptionRefused = errors.New("pubsub: subscription refused")
)
