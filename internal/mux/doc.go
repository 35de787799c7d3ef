// Package mux is the pub/sub multiplexer behind package pubsub, whose
// Multiplexer and Waiter are thin wrappers of the types here.
//
// This module's lock packages use it directly, for the parts that serve their
// protocol rather than a general user, and which package pubsub therefore
// does not export: addressed messages, which wake one Waiter by tag (how a
// Redis-side queue hands a release, and the resource itself, to the waiter at
// its head in whichever process it lives; see SetTag, SetTagKeeping and
// TakeData), listeners that take no budget (IgnoreBudget), and joining a
// channel only while its subscription is live (SubscribeIfLive).
//
// Package pubsub documents the behaviour that the two share; the
// documentation of a method here that pubsub wraps says the same.
package mux
