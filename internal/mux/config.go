package mux

import "time"

// Config is a Multiplexer's settings, which package pubsub's options set and
// check (its Option is a func(*Config) error).
type Config struct {
	Connections int           // dedicated pub/sub connections, at least 1
	Linger      time.Duration // see pubsub.WithLinger
	MaxBackoff  time.Duration // see pubsub.WithMaxReconnectBackoff
	Sharding    Sharding
}

// DefaultConfig is a Config before any option.
func DefaultConfig() Config {
	return Config{Connections: 1, Linger: 250 * time.Millisecond, MaxBackoff: time.Second}
}

// Option is what package pubsub's Option satisfies, so that New takes the
// options given to pubsub.New or rlock.WithPubSub as they are: this package
// cannot name their type.
type Option interface{ ~func(*Config) error }

// Sharding chooses between classic and sharded pub/sub (see
// pubsub.WithSharding, whose constants map to these).
type Sharding int

const (
	ShardingAuto Sharding = iota
	ShardingClassic
	ShardingSharded
)
