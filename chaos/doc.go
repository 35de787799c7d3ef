// Package chaos holds the fault-injection suite of this module; it has no
// API. Its tests (chaos_test.go) run rlock.Mutex and semaphore.Semaphore
// workloads in several worker processes against a real Redis while faults
// are injected (killed connections, a restarted or stalled server, paused
// holders, a cut-off watchdog, lost pub/sub messages), and check the
// outcome: fenced writes, no lost update, holders within the limit, no stuck
// waiter, nothing left behind.
//
// A short version of every scenario runs with go test ./...; the full one
// with
//
//	make chaos
//
// which prints a table of the figures (see RESULTS.md, and the Guarantees
// section of README.md for what they mean).
// The test binary re-executes itself as a worker process when the
// environment variable RELOCK_CHAOS_WORKER holds a worker configuration.
package chaos
