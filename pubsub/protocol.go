package pubsub

import "github.com/relockio/relock/internal/pubsubx/hook"

// The lock packages of this module tag Waiters and read data from addressed
// messages; those methods are unexported here, out of the public API, and
// reach them typed through internal/pubsubx.
func init() {
	hook.SubscribeIfLive = (*Multiplexer).subscribeIfLive
	hook.SetTag = (*Waiter).setTag
	hook.SetTagKeeping = (*Waiter).setTagKeeping
	hook.TakeData = (*Waiter).takeData
	hook.IgnoreBudget = (*Waiter).ignoreBudget
}
