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

// ACLGlobChars are the characters that Redis ACL key and channel patterns
// (~pattern, &pattern) treat as glob syntax: * ? and [ ] match other text,
// and \ escapes the next character, so a pattern naming a prefix that holds
// one no longer matches that prefix alone (or at all).
const ACLGlobChars = `*?[]\`

// ValidatePrefix checks a key prefix. It refuses what ValidateName refuses
// (braces, control characters, invalid UTF-8, over MaxNameLength bytes) and
// also "" and the ACL glob characters (ACLGlobChars): the ACL rule that
// confines a Redis user to one prefix is the pair of patterns
// "~<prefix>:{*" and "&<prefix>:{*", which only an exact, non-empty prefix
// keeps from matching the keys and channels of other prefixes (with "" the
// pattern would be "~:{*" for keys "{name}..." that sit beside every other
// application's hash-tagged keys). A ':' is allowed: the '{' that follows
// the prefix in every key keeps "a" and "a:b" apart.
func ValidatePrefix(prefix string, invalid error) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty key prefix: keys would start with the lock name's hash tag, where no ACL key pattern can tell them from other applications' keys", invalid)
	}
	if err := validate("key prefix", prefix, invalid); err != nil {
		return err
	}
	if i := strings.IndexAny(prefix, ACLGlobChars); i >= 0 {
		return fmt.Errorf("%w: key prefix %q contains %q, a glob character of Redis ACL patterns (%s): an ACL pattern for this prefix would not confine a user to it", invalid, prefix, prefix[i], ACLGlobChars)
	}
	return nil
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
// So every key and channel under a prefix matches "<prefix>:{*", the ACL
// pattern the README gives (prefix is never empty: see ValidatePrefix).
func Base(prefix, name string) string {
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
