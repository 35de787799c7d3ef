package rlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWaitOverNamesLastErrorOnce: a wait that ran out after failing to reach
// Redis reports ErrUnavailable, the end of the wait and the last error, and
// names that error once, though the wait's own error carries it already
// (core.WaitWith adds it when the wait ends after retried errors). Seen as
// "(last error: dial tcp ...: i/o timeout); last error: dial tcp ...: i/o
// timeout" in a chaos run.
func TestWaitOverNamesLastErrorOnce(t *testing.T) {
	last := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}
	other := errors.New("connection reset by peer")
	timeout := &waitTimeoutError{8 * time.Second}
	for _, tc := range []struct {
		what    string
		waitErr error // the wait's error, as core.WaitWith returns it
		want    []error
	}{
		{"the wait's error carries the last error", fmt.Errorf("%w (last error: %w)", timeout, last), []error{last}},
		{"the wait's error does not", timeout, []error{last}},
		{"it carries another one", fmt.Errorf("%w (last error: %w)", timeout, other), []error{other, last}},
	} {
		for _, got := range []error{
			(&acquisition{m: &Mutex{name: "res"}, lastErr: last}).failure(tc.waitErr),
			(&rwAcquisition{rw: &RWMutex{name: "res"}, write: true, lastErr: last}).failure(tc.waitErr),
		} {
			msg := got.Error()
			if !errors.Is(got, ErrUnavailable) || !errors.Is(got, context.DeadlineExceeded) {
				t.Errorf("%s: %q does not match ErrUnavailable and context.DeadlineExceeded", tc.what, msg)
			}
			for _, e := range tc.want {
				if !errors.Is(got, e) || strings.Count(msg, e.Error()) != 1 {
					t.Errorf("%s: %q should match and name %q once", tc.what, msg, e)
				}
			}
		}
	}
}
