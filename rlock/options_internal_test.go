package rlock

import (
	"testing"
	"time"
)

// TestWaitTimeoutZeroIsOneAttempt: WithWaitTimeout(0) is accepted and marks
// the call as a single attempt (Mutex.lock treats it as TryLock).
func TestWaitTimeoutZeroIsOneAttempt(t *testing.T) {
	lc, err := newLockConfig([]LockOption{WithWaitTimeout(0)})
	if err != nil || !lc.tryOnce || !lc.waitSet || lc.waitTimeout != 0 {
		t.Fatalf("WithWaitTimeout(0): %+v, %v; want tryOnce", lc, err)
	}
	lc, err = newLockConfig([]LockOption{WithWaitTimeout(time.Second)})
	if err != nil || lc.tryOnce {
		t.Fatalf("WithWaitTimeout(1s): %+v, %v; want a wait, not tryOnce", lc, err)
	}
}
