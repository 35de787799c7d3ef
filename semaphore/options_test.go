package semaphore_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/semaphore"
)

// TestAcquireOptionBounds: WithLease and WithWaitTimeout outside their range
// are rejected with an error naming the option; WithWaitTimeout(0) is one
// attempt, not an error.
func TestAcquireOptionBounds(t *testing.T) {
	e := newEnv(t)
	s := e.sem(e.client(), "bounds", 1)
	for _, tc := range []struct {
		name string
		opt  semaphore.AcquireOption
	}{
		{"WithLease", semaphore.WithLease(math.MaxInt64)},
		{"WithLease", semaphore.WithLease(semaphore.MaxLease + time.Millisecond)},
		{"WithWaitTimeout", semaphore.WithWaitTimeout(-time.Nanosecond)},
		{"WithWaitTimeout", semaphore.WithWaitTimeout(math.MaxInt64)},
	} {
		if _, err := s.Acquire(e.ctx, 1, tc.opt); !errors.Is(err, semaphore.ErrInvalidLease) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Acquire with an out-of-range %s: err = %v, want ErrInvalidLease naming the option", tc.name, err)
		}
	}
	if n := e.available(s); n != 1 {
		t.Fatalf("rejected options took permits: %d available", n)
	}

	// WithWaitTimeout(0): one attempt.
	p := mustAcquire(t, s, e.ctx, 1, semaphore.WithWaitTimeout(0), semaphore.WithLease(semaphore.MaxLease))
	start := time.Now()
	if _, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(0)); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("Acquire WithWaitTimeout(0) with no permit free: err = %v, want ErrNoPermits", err)
	}
	if d := time.Since(start); d > prompt {
		t.Errorf("Acquire WithWaitTimeout(0) with no permit free took %v: it waited", d)
	}
	mustRelease(t, s, p)
}

// TestLockWaitTimeoutZero: on a one-permit Lock too, WithWaitTimeout(0) is
// one attempt: held by another Client, Lock fails at once with ErrNoPermits
// (a generous bound: nothing waits) and leaves no waiter queued.
func TestLockWaitTimeoutZero(t *testing.T) {
	e := newEnv(t)
	holder := semaphore.NewLock(e.client(), "zero")
	other := semaphore.NewLock(e.client(), "zero")
	lc, err := holder.Lock(e.ctx, semaphore.WithWaitTimeout(0))
	if err != nil {
		t.Fatalf("Lock WithWaitTimeout(0) on a free lock: %v", err)
	}
	start := time.Now()
	if _, err := other.Lock(e.ctx, semaphore.WithWaitTimeout(0)); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("Lock WithWaitTimeout(0) on a held lock: err = %v, want ErrNoPermits", err)
	}
	if d := time.Since(start); d > prompt {
		t.Errorf("Lock WithWaitTimeout(0) on a held lock took %v: it waited", d)
	}
	if st := e.state(other.Semaphore()); st.Queued != 0 {
		t.Errorf("Lock WithWaitTimeout(0) left %d waiter(s) queued", st.Queued)
	}
	if err := holder.Unlock(lc); err != nil {
		t.Fatal(err)
	}
}
