package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// Timestamps are nanoseconds of the system-wide CLOCK_MONOTONIC, so that the
// records of different worker processes on one machine can be compared (the
// monotonic reading inside time.Time is private to each process). They are
// read as an offset taken once plus Go's own monotonic clock, which reads the
// same CLOCK_MONOTONIC, so a timestamp costs no system call.
var (
	clockBase   = time.Now()
	clockOffset = func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			panic("bench: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
		}
		return ts.Nano() - int64(time.Since(clockBase))
	}()
)

// mono returns the current CLOCK_MONOTONIC time in nanoseconds.
func mono() int64 { return clockOffset + int64(time.Since(clockBase)) }
