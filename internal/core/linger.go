package core

import "time"

// A turn keeps a contended lock, at its last release, for the Client's next
// acquisition: a worker that locks again right away takes it with no round
// trip. Every other Client waits while it lingers, and when the worker does
// not come back (it stopped, or its next job came from elsewhere) that wait
// buys nothing. So the linger follows how soon the Client's next acquisition
// actually came the last times (the relock gap): a few times the longest
// recent gap, never above the configured linger (WithLinger), and never below
// a quarter of it, so that a goroutine delayed a little (a GC pause, the
// scheduler) still finds the lock kept. Until a gap is seen, the configured
// linger applies. (Such short lingers are timed by AfterFunc's fine clock:
// Go's timers would stretch them to about a millisecond.)
const (
	// lingerGapFactor is how many times the estimated gap a linger lasts.
	lingerGapFactor = 8
	// lingerFloorDivisor: the linger is at least limit/lingerFloorDivisor.
	lingerFloorDivisor = 4
)

// TurnLinger is how long to keep a released lock for the Client's next
// acquisition, given the configured linger (limit) and the relock gap
// estimated by NoteRelockGap (0: none seen yet).
func TurnLinger(limit, gap time.Duration) time.Duration {
	if gap <= 0 {
		return limit
	}
	return min(limit, max(limit/lingerFloorDivisor, lingerGapFactor*gap))
}

// NoteRelockGap folds gap, the time from a park to the acquisition that took
// the lock kept, into est: a maximum that decays by an eighth per
// observation, so one slow relock lengthens the next lingers at once and is
// forgotten over the following dozen.
func NoteRelockGap(est, gap time.Duration) time.Duration {
	return max(gap, est-est/8, 1)
}
