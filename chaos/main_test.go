//go:build linux

package chaos_test

import (
	"os"
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain runs a worker process when the controller started this binary as
// one (see worker_test.go); otherwise it runs the tests and fails the run when
// goroutines outlive them or an owned Redis was never closed.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		os.Exit(workerMain(cfg))
	}
	redistest.VerifyNoLeaks(m)
}
