package core

import "errors"

// Errors that every primitive reports the same way; package rlock re-exports
// them under the same names, and the semaphore package reuses them.
var (
	ErrLeaseLost = errors.New("rlock: lease lost")
	ErrUnlocked  = errors.New("rlock: unlocked")
	ErrClosed    = errors.New("rlock: client closed")
	// ErrAbandoned: the Client gave a hold up because a command's outcome on
	// it could not be learned (see AbandonError).
	ErrAbandoned = errors.New("rlock: hold abandoned")
	// ErrUnavailable: a wait ended while Redis could not be reached.
	ErrUnavailable = errors.New("rlock: redis unavailable")
	// ErrNotReplicated: an acquisition too few replicas acknowledged in
	// time (rlock.WithReplicaAck); it was undone.
	ErrNotReplicated = errors.New("rlock: not acknowledged by enough replicas")
)
