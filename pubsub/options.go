package pubsub

import (
	"time"

	"github.com/relockio/relock/internal/mux"
)

// Option configures a Multiplexer. An Option given a value out of range makes
// New fail with an error that says which and matches ErrInvalidOption.
type Option func(*config) error

// config is an alias, so that the lock packages can hand Options to mux.New.
type config = mux.Config

// WithConnections sets how many dedicated pub/sub connections carry the
// subscriptions; channels are spread over them by hash. Default 1, at most 64.
func WithConnections(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 64 {
			return mux.InvalidOptionf("pubsub: connections must be between 1 and 64, got %d", n)
		}
		c.Connections = n
		return nil
	}
}

// Bounds of the duration options; New rejects a value outside them.
const (
	// maxLinger: every channel used within the linger stays subscribed, so
	// a longer linger only piles up subscriptions (a Client of package rlock
	// has one channel per lock name it waited for).
	maxLinger = time.Minute
	// maxMaxBackoff: a longer pause between reconnection attempts keeps
	// Waiters deaf to messages for that long after Redis is back.
	maxMaxBackoff = time.Minute
)

// WithLinger sets how long a channel stays subscribed after its last Waiter
// leaves, so that a waiter arriving soon after reuses the subscription instead
// of paying a new SUBSCRIBE round trip. Default 250ms; 0 lets it go idle at
// once (see the package documentation); allowed 0 to 1 minute.
func WithLinger(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > maxLinger {
			return mux.InvalidOptionf("pubsub: WithLinger(%v) is out of range: must be between 0 and %v", d, maxLinger)
		}
		c.Linger = d
		return nil
	}
}

// WithMaxReconnectBackoff caps the delay between reconnection attempts, which
// starts at 10ms and doubles. Default 1s; allowed 10ms (a smaller cap would
// redial a server that is down in a tight loop) to 1 minute.
func WithMaxReconnectBackoff(d time.Duration) Option {
	return func(c *config) error {
		if d < mux.MinReconnectBackoff || d > maxMaxBackoff {
			return mux.InvalidOptionf("pubsub: WithMaxReconnectBackoff(%v) is out of range: must be between %v and %v", d, mux.MinReconnectBackoff, maxMaxBackoff)
		}
		c.MaxBackoff = d
		return nil
	}
}

// Sharding chooses between classic and sharded pub/sub; see WithSharding.
type Sharding int

const (
	// ShardingAuto uses sharded pub/sub on a Redis Cluster client (rueidis
	// ClientModeCluster) when the server runs Redis 7 or later, and classic
	// pub/sub otherwise. The version is read once, with INFO server, on
	// first use; a Redis user denied INFO gets classic pub/sub.
	ShardingAuto Sharding = iota
	// ShardingClassic always uses SUBSCRIBE/PUBLISH. In a cluster every
	// message is then broadcast to every node over the cluster bus.
	ShardingClassic
	// ShardingSharded always uses SSUBSCRIBE/SPUBLISH, each channel on the
	// master owning its slot. It needs a cluster client and Redis 7.
	ShardingSharded
)

// WithSharding sets whether channels are subscribed with classic or sharded
// pub/sub. Default ShardingAuto. Every process that locks the same names
// must publish the way the others subscribe: mixed fleets (an older release
// of this module next to this one on one cluster) should force
// ShardingClassic until all are upgraded.
func WithSharding(s Sharding) Option {
	return func(c *config) error {
		switch s {
		case ShardingAuto:
			c.Sharding = mux.ShardingAuto
		case ShardingClassic:
			c.Sharding = mux.ShardingClassic
		case ShardingSharded:
			c.Sharding = mux.ShardingSharded
		default:
			return mux.InvalidOptionf("pubsub: unknown sharding mode %d", s)
		}
		return nil
	}
}
