package faultproxy_test

import (
	"testing"

	"github.com/relockio/relock/internal/redistest"
)

// TestMain fails the run when goroutines (proxy pipes, rueidis connections)
// outlive the tests or an owned Redis was never closed.
func TestMain(m *testing.M) { redistest.VerifyNoLeaks(m) }
