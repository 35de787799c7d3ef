package relock_test

import (
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain fails the run when goroutines (a watchdog, a waiting Lock, a
// rueidis connection) outlive the tests or an owned Redis was never closed.
func TestMain(m *testing.M) { redistest.VerifyNoLeaks(m) }
