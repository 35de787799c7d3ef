package redistest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientPauseAndDebugSleep(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t, WithDebugCommand())

	require.NoError(t, s.ClientPause(ctx, 300*time.Millisecond, ""))
	start := time.Now()
	_, err := s.Do(ctx, "SET", "k", "v") // held until the pause ends
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

	start = time.Now()
	require.NoError(t, s.DebugSleep(ctx, 200*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
}

func TestSnapshot(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	_, err := s.Do(ctx, "HSET", "a:h", "f", "1")
	require.NoError(t, err)
	_, err = s.Do(ctx, "SET", "a:s", "v", "PX", "60000")
	require.NoError(t, err)
	_, err = s.Do(ctx, "SET", "b", "v")
	require.NoError(t, err)
	before, err := s.Snapshot(ctx, "a:*")
	require.NoError(t, err)
	require.Len(t, before, 2)
	assert.True(t, before["a:s"].HasExpiry)
	assert.False(t, before["a:h"].HasExpiry)
	_, err = s.Do(ctx, "HSET", "a:h", "f", "2")
	require.NoError(t, err)
	after, err := s.Snapshot(ctx, "a:*")
	require.NoError(t, err)
	assert.NotEqual(t, before["a:h"], after["a:h"])
	assert.Equal(t, before["a:s"], after["a:s"])
}
