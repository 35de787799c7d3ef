package mux_test

import (
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain fails the run when goroutines outlive the tests (a Multiplexer
// connection goroutine, a rueidis connection of a client never closed) or an
// owned Redis was never closed.
func TestMain(m *testing.M) { redistest.VerifyNoLeaks(m) }
