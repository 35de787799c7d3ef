package redistest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helperTimeout allows for compiling the Docker helper (testcontainers and
// the Docker client) on a cold build cache.
const helperTimeout = 5 * time.Minute

// noDockerHost points the Docker helper at a loopback port nothing listens
// on, so that these tests run the helper for real, with or without an
// engine on this machine, and can recognise the address in its answer.
func noDockerHost(t *testing.T) string {
	port, err := reservePort()
	require.NoError(t, err)
	t.Cleanup(func() { releasePort(port) })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	t.Setenv("DOCKER_HOST", "tcp://"+addr)
	return addr
}

// TestDockerProbeRunsHelper checks that the probe reaches the dockerredis
// module through `go run` and reports the engine's failure, not a failure
// to find or build the helper.
func TestDockerProbeRunsHelper(t *testing.T) {
	addr := noDockerHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	err := dockerAvailable(ctx)
	require.Error(t, err)
	t.Logf("probe: %v", err)
	assert.Contains(t, err.Error(), addr)
}

// TestDockerHelperStartFailure starts a container through the helper with no
// engine behind DOCKER_HOST: the helper's error comes back, the helper exits
// (its stdout reader too: TestMain checks for leaked goroutines), and the port
// is released.
func TestDockerHelperStartFailure(t *testing.T) {
	addr := noDockerHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	reserved := func() int {
		registry.Lock()
		defer registry.Unlock()
		return len(registry.ports)
	}
	before := reserved()
	s, err := startContainer(ctx, newConfig([]Option{WithImage("redis:7")}))
	if err == nil {
		_ = s.Close()
		t.Fatal("startContainer succeeded with DOCKER_HOST pointing at nothing")
	}
	t.Logf("start: %v", err)
	assert.Contains(t, err.Error(), addr)
	assert.Contains(t, err.Error(), "redis:7")
	assert.Equal(t, before, reserved(), "the container's port was not released")
}
