package mux

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
