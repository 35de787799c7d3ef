package rlock_test

import (
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain runs the tests and examples, stops the examples' Redis (see
// example_test.go), then fails the run if goroutines outlive the tests (a
// watchdog, a waiting call, a background abandon, a Multiplexer connection, a
// rueidis client never closed) or a server was never closed.
func TestMain(m *testing.M) { redistest.VerifyNoLeaksAfter(m, stopExampleServer) }
