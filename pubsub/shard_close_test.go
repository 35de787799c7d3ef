package pubsub_test

import (
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// Close with a shard connection open to each of three paused masters
// closes them all at once: rueidis waits up to a second on each
// connection's peer as it closes it, and one after another Close took three
// (3.00s measured).
func TestShardedCloseWithPausedMastersIsPrompt(t *testing.T) {
	c := redistest.NewCluster(t, 3, 0, redistest.WithArgs("--cluster-node-timeout", "60000"))
	ctx := mxContext(t)
	m, err := pubsub.New(redistest.ClusterClient(t, c))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range shardChannels(ctx, t, c, redistest.KeyPrefix(t)) {
		w := mxSubscribe(ctx, t, m, ch)
		defer w.Leave(true)
	}
	for _, s := range c.Masters {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Resume() }()
	}
	start := time.Now()
	m.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close with %d paused masters took %v: their connections closed one after another", len(c.Masters), took)
	} else {
		t.Logf("Close with %d paused masters took %v", len(c.Masters), took)
	}
}
