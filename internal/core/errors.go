package core

import (
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

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
	// ErrPermission: the Redis user may not run a command the locks need.
	ErrPermission = errors.New("rlock: permission denied")
)

// Refused returns err, made to match ErrPermission as well when Redis refused
// the ACL user a command: the NOPERM error of a lock script, which names the
// command a script could not run (it checks them before it changes anything,
// see lock_denied in internal/lua/publish_lib.lua), or the one Redis returns
// for a command a script was refused halfway (Redis < 7, where a script
// cannot check).
func Refused(err error) error {
	var re *rueidis.RedisError
	if err == nil || errors.Is(err, ErrPermission) || !errors.As(err, &re) {
		return err
	}
	if msg := re.Error(); strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "can't run this command") {
		return refusedError{err}
	}
	return err
}

type refusedError struct{ err error }

func (e refusedError) Error() string        { return e.err.Error() }
func (e refusedError) Unwrap() error        { return e.err }
func (e refusedError) Is(target error) bool { return target == ErrPermission }

// packagePrefixes start the messages of this module's errors.
var packagePrefixes = []string{"rlock: ", "semaphore: ", "pubsub: "}

// Inner returns err for use inside a message that already starts with a
// package prefix: its text loses a leading "rlock: ", "semaphore: " or
// "pubsub: ", so that a message names its package once, while errors.Is and
// errors.As see err unchanged. Nil stays nil.
func Inner(err error) error {
	if err == nil {
		return nil
	}
	return innerError{err}
}

type innerError struct{ err error }

func (e innerError) Error() string {
	msg := e.err.Error()
	for _, p := range packagePrefixes {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

func (e innerError) Unwrap() error { return e.err }

// Rebrand returns a sentinel error with message msg that matches base with
// errors.Is: how package semaphore has errors of its own wording ("semaphore:
// lease lost") that are also the shared ones (ErrLeaseLost), as documented.
func Rebrand(msg string, base error) error { return &rebranded{msg, base} }

type rebranded struct {
	msg  string
	base error
}

func (e *rebranded) Error() string { return e.msg }
func (e *rebranded) Unwrap() error { return e.base }
