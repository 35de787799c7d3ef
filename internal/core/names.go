package core

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength is the longest name or key prefix accepted, in bytes.
const MaxNameLength = 1024

// ValidateName checks a lock or semaphore name, wrapping invalid in the error.
// Braces are refused because they would move the hash tag that keeps one
// primitive's keys and channel in one Redis Cluster slot.
func ValidateName(name string, invalid error) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", invalid)
	}
	return validate("name", name, invalid)
}

// ValidatePrefix checks a key prefix ("" is allowed).
func ValidatePrefix(prefix string, invalid error) error {
	return validate("key prefix", prefix, invalid)
}

func validate(what, s string, invalid error) error {
	switch {
	case len(s) > MaxNameLength:
		return fmt.Errorf("%w: %s is %d bytes, at most %d allowed", invalid, what, len(s), MaxNameLength)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %s is not valid UTF-8", invalid, what, Quote(s))
	case strings.ContainsAny(s, "{}"):
		return fmt.Errorf("%w: %s %s contains a brace", invalid, what, Quote(s))
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s %s contains a control character", invalid, what, Quote(s))
	}
	return nil
}

// QuoteMax is how many bytes of a name Quote shows.
const QuoteMax = 64

// Quote quotes a name for an error message: whole when it is at most
// QuoteMax bytes, else its first QuoteMax bytes (cut at a character boundary)
// followed by its length, as in "abc..."... (600 bytes). A rejected name may
// be long and binary, and every control byte quotes as four: a message must
// not grow with it.
func Quote(s string) string {
	if len(s) <= QuoteMax {
		return strconv.Quote(s)
	}
	cut := QuoteMax
	for cut > QuoteMax-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// Base is the common key stem of the primitive called name: every key and
// channel of it starts with "<prefix>:{name}", sharing the hash tag {name}.
func Base(prefix, name string) string {
	if prefix == "" {
		return "{" + name + "}"
	}
	return prefix + ":{" + name + "}"
}

// GrantChannel is the channel on which scripts address hand-offs of the
// resource at base (a lock's or a semaphore's key base) to the Client whose id
// is clientID. Each Client subscribes to its own, so a hand-off reaches one
// process whatever the number of processes waiting, and a publish that reaches
// no subscriber tells the script that the waiter's Client is gone (its
// connection closed). It shares base's hash tag, as Redis Cluster requires of
// a channel a script publishes to.
func GrantChannel(base, clientID string) string { return GrantChannelPrefix(base) + clientID }

// GrantChannelPrefix is GrantChannel without the client id: scripts append the
// client id of an owner field (the part before its last ':', see
// Client.NewID).
func GrantChannelPrefix(base string) string { return base + ":to:" }
