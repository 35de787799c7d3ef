// Package pubsubx gives this module's lock packages the parts of a
// pubsub.Multiplexer that serve their protocol rather than a general user:
// addressed messages, which wake one Waiter by tag (how a Redis-side queue
// hands a release, and the resource itself, to the waiter at its head in
// whichever process it lives), listeners that take no budget, and joining a
// channel only while its subscription is live.
//
// They are methods of package pubsub's types, unexported there so that they
// stay out of its public API, and reached here through hooks that package
// pubsub sets at initialisation (see package hook).
package pubsubx

import (
	"github.com/relockio/relock/internal/pubsubx/hook"
	"github.com/relockio/relock/pubsub"
)

// The wire format of addressed messages; see package hook.
const (
	AddressPrefix        = hook.AddressPrefix
	AddressDataSeparator = hook.AddressDataSeparator
	WakeData             = hook.WakeData
)

// The hooks, typed once: package pubsub, which this package imports, has set
// them before this package's variables are initialised. A mismatch between a
// hook and its type here panics at start-up, in every test binary.
var (
	subscribeIfLive = hook.SubscribeIfLive.(func(*pubsub.Multiplexer, string, int64) *pubsub.Waiter)
	setTag          = hook.SetTag.(func(*pubsub.Waiter, string))
	setTagKeeping   = hook.SetTagKeeping.(func(*pubsub.Waiter, string, func(held, next string) bool))
	takeData        = hook.TakeData.(func(*pubsub.Waiter) string)
	ignoreBudget    = hook.IgnoreBudget.(func(*pubsub.Waiter))
)

// SubscribeIfLive queues a new Waiter on channel, as m.SubscribeWeighted
// does, only when the channel's subscription is live: confirmed by Redis on
// the current connection (other Waiters are on it, or it lingers). It never
// waits and sends nothing; it returns nil when the channel is not subscribed,
// is being resubscribed after a reconnect, or m is closed.
func SubscribeIfLive(m *pubsub.Multiplexer, channel string, weight int64) *pubsub.Waiter {
	return subscribeIfLive(m, channel, weight)
}

// SetTag names w so that a message AddressPrefix + tag on its channel wakes
// it, and only it among the untagged and differently tagged Waiters. An
// empty tag removes the name. Changing the tag discards the data of messages
// addressed to the former one (see TakeData).
func SetTag(w *pubsub.Waiter, tag string) { setTag(w, tag) }

// SetTagKeeping tags w as SetTag does, and sets which data w keeps until
// TakeData takes it: a message replaces the data held unless keep(held,
// next) says to keep it, and a wake without data (a message that carries
// none, a budget message, a resubscription) offers WakeData. For a
// queued waiter, whose channel anyone may publish on: a message that proves
// nothing must not displace a grant, nor a request to re-check sooner. keep
// runs on the connection's reading goroutine and must be quick.
func SetTagKeeping(w *pubsub.Waiter, tag string, keep func(held, next string) bool) {
	setTagKeeping(w, tag, keep)
}

// TakeData returns and clears the data of the message addressed to w's tag
// that w kept (the last one, unless SetTagKeeping set a rule): a message
// AddressPrefix + tag + AddressDataSeparator + data stores data before it
// wakes w, so that a Redis-side queue can hand the resource itself (a lock
// granted, with its fencing token) along with the wake-up. It returns ""
// when no such message came since the last call.
func TakeData(w *pubsub.Waiter) string { return takeData(w) }

// IgnoreBudget makes w pass over budget messages (see package pubsub): only a
// message addressed to its tag, pubsub.WakeAll, a reconnect or Notify wake
// it. For a listener that waits for no release of its own, so that it never
// takes a wake-up meant for a waiter.
func IgnoreBudget(w *pubsub.Waiter) { ignoreBudget(w) }
