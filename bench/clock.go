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
	clockOffset = calibrate()
)

// calibrate reads CLOCK_MONOTONIC between two readings of Go's clock, many
// times, and keeps the reading with the narrowest bracket: a process
// descheduled between the two clocks (16 workers starting at once on 2
// cores) would otherwise be off by the time it slept, and holders in
// different processes would seem to overlap.
func calibrate() int64 {
	var offset int64
	width := int64(-1)
	for range 200 {
		var ts unix.Timespec
		before := int64(time.Since(clockBase))
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			panic("bench: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
		}
		after := int64(time.Since(clockBase))
		if w := after - before; width < 0 || w < width {
			width, offset = w, ts.Nano()-(before+after)/2
		}
	}
	return offset
}

// mono returns the current CLOCK_MONOTONIC time in nanoseconds.
func mono() int64 { return clockOffset + int64(time.Since(clockBase)) }
