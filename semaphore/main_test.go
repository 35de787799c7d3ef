package semaphore_test

import (
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain runs a waiter process when a test started this binary as one (see
// waiterProcess); otherwise it runs the tests and examples, stops the
// examples' Redis (see example_test.go), then fails the run if goroutines
// outlive the tests (a watchdog, a waiting call, a background abandon, a
// Multiplexer connection, a rueidis client never closed) or a server was never
// closed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(waiterProcessEnv); spec != "" {
		os.Exit(waiterProcess(spec))
	}
	redistest.VerifyNoLeaksAfter(m, stopExampleServer)
}
