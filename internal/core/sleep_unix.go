//go:build unix

package core

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepFine sleeps for about d in the kernel, which times it to tens of
// microseconds (time.Sleep would round it up to the runtime poller's
// millisecond). An interrupted sleep just ends early: the caller loops.
func sleepFine(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = unix.Nanosleep(&ts, nil)
}
