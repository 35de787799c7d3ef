package mux

import (
	"errors"
	"fmt"
)

// The errors of package pubsub, which re-exports them: see it for what each
// means.
var (
	ErrClosed              = errors.New("pubsub: multiplexer closed")
	ErrInvalidChannel      = errors.New("pubsub: invalid channel")
	ErrSubscriptionRefused = errors.New("pubsub: subscription refused")
	ErrInvalidOption       = errors.New("pubsub: invalid option")
)

// Errors of values not made by New or Subscribe (zero or nil ones), which
// behave as closed: they match ErrClosed and say what is wrong.
var (
	errNotNew        = fmt.Errorf("%w: Multiplexer not made by New", ErrClosed)
	errNotSubscribed = fmt.Errorf("%w: Waiter not made by Subscribe", ErrClosed)
)

// errNilContext is returned for a nil context, before anything is done.
func errNilContext(op string) error {
	return fmt.Errorf("%w: %s: nil context", ErrInvalidOption, op)
}

// InvalidOptionf formats an error that matches ErrInvalidOption and reads
// exactly as formatted: package pubsub's options return it, so that their
// messages stay as they were while errors.Is(err, ErrInvalidOption) holds.
func InvalidOptionf(format string, args ...any) error {
	return invalidOption{fmt.Sprintf(format, args...)}
}

type invalidOption struct{ msg string }

func (e invalidOption) Error() string        { return e.msg }
func (e invalidOption) Is(target error) bool { return target == ErrInvalidOption }
