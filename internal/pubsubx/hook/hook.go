// Package hook carries package pubsub's lock-protocol hooks to package
// pubsubx, which wraps them with types. It exists only to break the import
// cycle: pubsub imports it and fills the hooks in its init; pubsubx imports
// pubsub, which guarantees they are filled before pubsubx reads them.
package hook

// The wire format of addressed messages, which the lock scripts
// (internal/lua) publish.
const (
	// AddressPrefix starts a payload that wakes the Waiters tagged with what
	// follows it: "@" + tag, optionally followed by AddressDataSeparator and
	// data for them.
	AddressPrefix = "@"
	// AddressDataSeparator separates the tag of an addressed payload from
	// the data it carries; tags must not contain it.
	AddressDataSeparator = " "
	// WakeData is the data a Waiter that keeps data by a rule (see
	// SetTagKeeping) is offered for a wake that carries none: a re-check
	// now. It is no grant and no notice of any lock package.
	WakeData = "!"
)

// Hooks set by package pubsub. Each holds a method expression of its type;
// the comment says which.
var (
	SubscribeIfLive any // func(*pubsub.Multiplexer, string, int64) *pubsub.Waiter
	SetTag          any // func(*pubsub.Waiter, string)
	SetTagKeeping   any // func(*pubsub.Waiter, string, func(held, next string) bool)
	TakeData        any // func(*pubsub.Waiter) string
	IgnoreBudget    any // func(*pubsub.Waiter)
)
