package mux

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/internal/slot"
)

// TestVerifyMasterOnReadonlyReplica: a connection rueidis opens to a replica
// for SendToReplicas is READONLY, and there a keyed read of the master's
// slot is answered instead of redirected. verifyMaster must still refuse
// that replica (pointing at the master), and accept the master.
func TestVerifyMasterOnReadonlyReplica(t *testing.T) {
	c := redistest.NewCluster(t, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	master, replica := c.Masters[0].Addr(), c.Replicas[0][0].Addr()
	rc := redistest.ClusterClientWithReplicas(t, c, func(o *rueidis.ClientOption) {
		o.SendToReplicas = func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
	})
	channel := fmt.Sprintf("{verify}:ch:%d", slot.Of("{verify}"))
	check := func(addr string) error {
		dc, cancel := rc.Nodes()[addr].Dedicate()
		defer cancel()
		return verifyMaster(ctx, dc, channel)
	}
	var nm *notMasterError
	if err := check(replica); !errors.As(err, &nm) || nm.master != master {
		t.Fatalf("verifyMaster on the READONLY replica = %v, want a notMasterError naming %s", err, master)
	}
	if err := check(master); err != nil {
		t.Fatalf("verifyMaster on the master = %v", err)
	}
}
