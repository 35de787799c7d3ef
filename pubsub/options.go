package pubsub

import (
	"fmt"
	"time"
)

// Option configures a Multiplexer.
type Option func(*config) error

type config struct {
	connections int
	linger      time.Duration
	maxBackoff  time.Duration
}

func defaultConfig() config {
	return config{connections: 1, linger: 250 * time.Millisecond, maxBackoff: time.Second}
}

// WithConnections sets how many dedicated pub/sub connections carry the
// subscriptions; channels are spread over them by hash. Default 1, at most 64.
func WithConnections(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("pubsub: connections must be between 1 and 64, got %d", n)
		}
		c.connections = n
		return nil
	}
}

// WithLinger sets how long a channel stays subscribed after its last Waiter
// leaves, so that a waiter arriving soon after reuses the subscription instead
// of paying a new SUBSCRIBE round trip. Default 250ms; 0 unsubscribes at once.
func WithLinger(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("pubsub: linger must not be negative, got %v", d)
		}
		c.linger = d
		return nil
	}
}

// WithMaxReconnectBackoff caps the delay between reconnection attempts, which
// starts at 10ms and doubles. Default 1s.
func WithMaxReconnectBackoff(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("pubsub: max reconnect backoff must be positive, got %v", d)
		}
		c.maxBackoff = d
		return nil
	}
}
