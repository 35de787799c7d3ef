package rlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// TestNewRefusesReplicaOnlyClient: a cluster client made with rueidis's
// ReplicaOnly sends every command to replicas, where no lock can be taken
// (every Lock would wait out its ctx on READONLY). New refuses it at once,
// saying why, instead of failing every Lock later.
func TestNewRefusesReplicaOnlyClient(t *testing.T) {
	cl := redistest.NewCluster(t, 3, 1)
	rc := redistest.ClusterClientWithReplicas(t, cl, func(o *rueidis.ClientOption) { o.ReplicaOnly = true })
	c, err := rlock.New(rc)
	if err == nil {
		_ = c.Close()
		t.Fatal("New accepted a ReplicaOnly client")
	}
	if !errors.Is(err, rlock.ErrInvalidOption) || !strings.Contains(err.Error(), "ReplicaOnly") {
		t.Fatalf("New with a ReplicaOnly client = %v, want ErrInvalidOption naming ReplicaOnly", err)
	}
	t.Log(err)
}
