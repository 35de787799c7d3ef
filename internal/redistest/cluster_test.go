package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// A 3-master cluster forms, a cluster client routes keys to all of them, and
// every slot has an owner among the masters.
func TestCluster(t *testing.T) {
	c := NewCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := ClusterClient(t, c)
	if rc.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("mode %v, want cluster", rc.Mode())
	}
	owners := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := rc.Do(ctx, rc.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		slot, err := c.KeySlot(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		owners[o.Addr()] = true
	}
	if len(owners) != 3 {
		t.Errorf("keys landed on %d masters, want 3", len(owners))
	}
	for _, m := range c.Masters {
		info, err := c.Info(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if info["cluster_known_nodes"] != "3" || info["cluster_size"] != "3" {
			t.Errorf("%s: %v", m, info)
		}
	}
}
