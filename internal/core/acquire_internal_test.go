package core

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
// (WaitWith adds it when the wait ends after retried errors). Seen as
// "(last error: dial tcp ...: i/o timeout); last error: dial tcp ...: i/o
// timeout" in a chaos run.
func TestWaitOverNamesLastErrorOnce(t *testing.T) {
	last := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}
	other := errors.New("connection reset by peer")
	timeout := &WaitTimeoutError{8 * time.Second}
	busy := errors.New("rlock: locked by another owner")
	for _, tc := range []struct {
		what    string
		waitErr error // the wait's error, as WaitWith returns it
		want    []error
	}{
		{"the wait's error carries the last error", fmt.Errorf("%w (last error: %w)", timeout, last), []error{last}},
		{"the wait's error does not", timeout, []error{last}},
		{"it carries another one", fmt.Errorf("%w (last error: %w)", timeout, other), []error{other, last}},
	} {
		for _, op := range []string{"lock", "write lock", "acquire"} {
			a := &Acquisition{Spec: Spec{Pkg: "rlock", Op: op, Name: "res", Busy: busy}, lastErr: last}
			got := a.failure(tc.waitErr)
			msg := got.Error()
			if !errors.Is(got, ErrUnavailable) || !errors.Is(got, context.DeadlineExceeded) || errors.Is(got, busy) {
				t.Errorf("%s: %q does not match ErrUnavailable and context.DeadlineExceeded only", tc.what, msg)
			}
			for _, e := range tc.want {
				if !errors.Is(got, e) || strings.Count(msg, e.Error()) != 1 {
					t.Errorf("%s: %q should match and name %q once", tc.what, msg, e)
				}
			}
		}
	}
}

// TestWaitOverBehindHolderIsBusy: a wait timeout that runs out after Redis
// said the lock is held is the kind's busy error wrapping the deadline, and
// never ErrUnavailable.
func TestWaitOverBehindHolderIsBusy(t *testing.T) {
	busy := errors.New("rlock: locked by another owner")
	a := &Acquisition{Spec: Spec{Pkg: "rlock", Op: "lock", Name: "res", Busy: busy}, Contended: true}
	got := a.failure(&WaitTimeoutError{5 * time.Millisecond})
	if !errors.Is(got, busy) || !errors.Is(got, context.DeadlineExceeded) || errors.Is(got, ErrUnavailable) {
		t.Fatalf("got %v: want the busy error wrapping context.DeadlineExceeded", got)
	}
}
