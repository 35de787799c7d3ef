package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
)

// TestReplicated: once NewReplicated returns, WAIT counts both replicas at
// once (its first call is no slower than the timeout asks), a write reaches
// them, and a paused replica is not counted.
func TestReplicated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := redistest.NewReplicated(t, 2)
	rc := redistest.Client(t, r.Master)
	wait := func(timeout int64) (n int64) {
		t.Helper()
		err := rc.Dedicated(func(dc rueidis.DedicatedClient) error {
			if err := dc.Do(ctx, dc.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
				return err
			}
			var err error
			n, err = dc.Do(ctx, dc.B().Wait().Numreplicas(2).Timeout(timeout).Build()).AsInt64()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := wait(100); n != 2 {
		t.Fatalf("WAIT 2 100 right after NewReplicated = %d, want 2", n)
	}
	for _, s := range r.Replicas {
		msg, err := s.Do(ctx, "GET", "k")
		if v, _ := msg.ToString(); err != nil || v != "v" {
			t.Fatalf("GET k on replica %s = %q, %v", s, v, err)
		}
	}
	if err := r.Replicas[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Replicas[0].Resume() }()
	if n := wait(100); n != 1 {
		t.Fatalf("WAIT with one replica paused = %d, want 1", n)
	}
}
