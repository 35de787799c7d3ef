package pubsub_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain points REDIS_ADDR, which the examples read, at a Redis of this run
// unless the user set it (see redistest.ServeExamples); then it runs the tests
// and examples and fails the run when goroutines outlive them (a Multiplexer
// connection goroutine, a rueidis connection of a client never closed) or an
// owned Redis was never closed.
func TestMain(m *testing.M) {
	stop, err := redistest.ServeExamples(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redistest.VerifyNoLeaksAfter(m, stop)
}
