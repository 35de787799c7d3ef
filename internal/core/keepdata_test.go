package core

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeepData checks the rule by which a queued waiter keeps a message
// until it reads it: a proven grant against anything but a later proven
// grant, a re-check now against notices, and the sooner of two notices.
func TestKeepData(t *testing.T) {
	// A grant "g<number>" is proven; anything else is not.
	proven := func(data string) (uint64, bool) {
		n, err := strconv.ParseUint(strings.TrimPrefix(data, "g"), 10, 64)
		return n, strings.HasPrefix(data, "g") && err == nil
	}
	keep := KeepData(proven, time.Minute)
	for _, tc := range []struct {
		held, next string
		want       bool
	}{
		{"g5", "~60000", true},
		{"g5", "!", true},
		{"g5", "g4", true}, // an older grant, replayed
		{"g5", "g6", false},
		{"g5", "x1:forged", true},
		{"!", "~60000", true},
		{"!", "g1", false},
		{"~100", "~60000", true},
		{"~60000", "~100", false},
		{"~100", "!", false},
		{"~100", "~999999999", false}, // beyond max: a re-check now
		{"~100", "g1", false},
	} {
		if got := keep(tc.held, tc.next); got != tc.want {
			t.Errorf("keep(%q, %q) = %v, want %v", tc.held, tc.next, got, tc.want)
		}
	}
}
