package semaphore_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain runs a waiter process when a test started this binary as one (see
// waiterProcess). Otherwise it points REDIS_ADDR, which the examples read, at
// a Redis of this run unless the user set it (see redistest.ServeExamples),
// runs the tests and examples, stops that Redis, then fails the run if
// goroutines outlive the tests (a watchdog, a waiting call, a background
// abandon, a Multiplexer connection, a rueidis client never closed) or a
// server was never closed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(waiterProcessEnv); spec != "" {
		os.Exit(waiterProcess(spec))
	}
	stop, err := redistest.ServeExamples(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redistest.VerifyNoLeaksAfter(m, stop)
}
