package rlock_test

import (
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain runs the tests and examples, stops the examples' Redis (see
// example_test.go), then fails the run if goroutines outlive the tests (a
// watchdog, a waiting call, a background abandon, a Multiplexer connection, a
// rueidis client never closed) or a server was never closed. Started as a
// worker process (see claim_test.go), the test binary runs that instead.
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerProcessEnv); spec != "" {
		os.Exit(workerProcess(spec))
	}
	redistest.VerifyNoLeaksAfter(m, stopExampleServer)
}
