package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// TestSentinelGroup checks the group end to end: a write through the
// Sentinel client reaches the replica, SENTINEL FAILOVER promotes it (and
// the client follows), and killing the new master fails over back to the
// first one once the Sentinels made it a replica.
func TestSentinelGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	t0 := time.Now()
	g := redistest.NewSentinelGroup(t)
	t.Logf("group started in %v", time.Since(t0))
	first, err := g.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first != g.Servers[0] {
		t.Fatalf("master %s, want the first server %s", first, g.Servers[0])
	}
	rc := redistest.SentinelClient(t, g)
	if err := rc.Do(ctx, rc.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	n, err := rc.Do(ctx, rc.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v; want 1", n, err)
	}

	start := time.Now()
	promoted, err := g.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER took %v", time.Since(start))
	if promoted != g.Servers[1] {
		t.Fatalf("promoted %s, want the replica %s", promoted, g.Servers[1])
	}
	// The client follows: poll until its write lands on the new master.
	for {
		err := rc.Do(ctx, rc.B().Set().Key("k").Value("w").Build()).Error()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the client never wrote to the new master: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	t0 = time.Now()
	// What the Sentinels would do at their next look (up to 10s away).
	host, port, _ := strings.Cut(promoted.Addr(), ":")
	if _, err := first.Do(ctx, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if err := redistest.WaitReplicas(ctx, promoted, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("old master a replica again after %v", time.Since(t0))

	start = time.Now()
	old, again, err := g.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover after killing the master took %v", time.Since(start))
	if old != promoted || again != g.Servers[0] {
		t.Fatalf("killed %s and promoted %s; want %s and %s", old, again, promoted, g.Servers[0])
	}
	v, err := rc.Do(ctx, rc.B().Get().Key("k").Build()).ToString()
	for err != nil && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond) // polling with a deadline
		v, err = rc.Do(ctx, rc.B().Get().Key("k").Build()).ToString()
	}
	if v != "w" {
		t.Fatalf("GET k = %q, %v; want the replicated %q", v, err, "w")
	}
}
