package core_test

import (
	"testing"
	"time"

	"github.com/relockio/relock/internal/core"
)

// TestParseNotice: only "~" and a positive number of milliseconds, at most
// the bound, is a claim notice; anything else (a grant, a forged or garbled
// message) is not.
func TestParseNotice(t *testing.T) {
	for _, tc := range []struct {
		data string
		want time.Duration
		ok   bool
	}{
		{"~3000", 3 * time.Second, true},
		{"~1", time.Millisecond, true},
		{"~60000", time.Minute, true},
		{"~60001", 0, false},
		{"~0", 0, false},
		{"~-5", 0, false},
		{"~", 0, false},
		{"~1234567890", 0, false},
		{"~3e3", 0, false},
		{"3000", 0, false},
		{"1:2:0:abc", 0, false},
		{"", 0, false},
	} {
		got, ok := core.ParseNotice(tc.data, time.Minute)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseNotice(%q) = %v, %v; want %v, %v", tc.data, got, ok, tc.want, tc.ok)
		}
	}
}
