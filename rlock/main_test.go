package rlock_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain points REDIS_ADDR and REDIS_QUORUM_ADDRS, which the examples read,
// at servers of this run unless the user set them (see
// redistest.ServeExamples); then it runs the tests and examples, stops those
// servers, and fails the run if goroutines outlive the tests (a watchdog, a
// waiting call, a background abandon, a Multiplexer connection, a rueidis
// client never closed) or a server was never closed. Started as a worker
// process (see claim_test.go), the test binary runs that instead.
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerProcessEnv); spec != "" {
		os.Exit(workerProcess(spec))
	}
	stop, err := redistest.ServeExamples(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redistest.VerifyNoLeaksAfter(m, stop)
}
