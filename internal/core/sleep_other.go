//go:build !unix

package core

import "time"

// sleepFine is time.Sleep where no kernel sleep is wired up: short timers
// are then as late as the runtime's.
func sleepFine(d time.Duration) { time.Sleep(d) }
