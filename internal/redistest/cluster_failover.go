package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Failovers of a Cluster's shards, for tests of what survives them. A shard is
// named by one of its slots: which node masters it changes with every
// failover.

// Role is a node's ROLE: a master, or a replica following Master (an
// address) whose replication link is in State ("connected" once in sync).
type Role struct {
	Master string // "" for a master
	State  string
}

// Role asks s for its role.
func (c *Cluster) Role(ctx context.Context, s *Server) (Role, error) {
	msg, err := s.Do(ctx, "ROLE")
	if err != nil {
		return Role{}, fmt.Errorf("redistest: %s: ROLE: %w", s, err)
	}
	f, err := msg.ToArray()
	if err != nil || len(f) == 0 {
		return Role{}, fmt.Errorf("redistest: %s: ROLE: %v %v", s, msg, err)
	}
	kind, _ := f[0].ToString()
	switch kind {
	case "master":
		return Role{}, nil
	case "slave":
		if len(f) < 4 {
			return Role{}, fmt.Errorf("redistest: %s: ROLE: %v", s, msg)
		}
		host, _ := f[1].ToString()
		port, _ := f[2].AsInt64()
		state, _ := f[3].ToString()
		return Role{Master: host + ":" + strconv.FormatInt(port, 10), State: state}, nil
	}
	return Role{}, fmt.Errorf("redistest: %s: ROLE %q", s, kind)
}

// ReplicasOf returns the live nodes that replicate master (whatever the state
// of their link), in [Cluster.Nodes] order.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Server) ([]*Server, error) {
	var out []*Server
	for _, s := range c.Nodes() {
		if s == master || !s.live() {
			continue
		}
		r, err := c.Role(ctx, s)
		if err != nil {
			return nil, err
		}
		if r.Master == master.Addr() {
			out = append(out, s)
		}
	}
	return out, nil
}

// Failover makes a replica of the master owning slot take its slots over
// with CLUSTER FAILOVER mode, run on the replica: "" (the coordinated
// failover: the master stops its clients until the replica has caught up,
// so no acknowledged write is lost), "FORCE" (no handshake with the master:
// what the replica has not received is lost) or "TAKEOVER" (no election
// either). It returns once every live node sees the replica as the owner and
// the cluster is ok, and the old master follows the new one, in sync. It
// returns the old master and the promoted replica.
func (c *Cluster) Failover(ctx context.Context, slot int64, mode string) (old, promoted *Server, err error) {
	switch mode {
	case "", "FORCE", "TAKEOVER":
	default:
		return nil, nil, fmt.Errorf("redistest: CLUSTER FAILOVER mode %q: want \"\", FORCE or TAKEOVER", mode)
	}
	if old, err = c.Owner(ctx, slot); err != nil {
		return nil, nil, err
	}
	replicas, err := c.ReplicasOf(ctx, old)
	if err != nil {
		return nil, nil, err
	}
	if len(replicas) == 0 {
		return nil, nil, fmt.Errorf("redistest: %s (slot %d) has no live replica to fail over to", old, slot)
	}
	promoted = replicas[0]
	args := []string{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	if _, err := promoted.Do(ctx, args...); err != nil {
		return nil, nil, fmt.Errorf("redistest: %s: %s: %w", promoted, strings.Join(args, " "), err)
	}
	got, err := c.WaitNewOwner(ctx, slot, old)
	if err != nil {
		return nil, nil, err
	}
	if got != promoted {
		return nil, nil, fmt.Errorf("redistest: slot %d went to %s, not to %s, which was told to take it", slot, got, promoted)
	}
	if err := c.waitFollows(ctx, old, promoted); err != nil {
		return nil, nil, err
	}
	return old, promoted, nil
}

// KillPrimary kills the master owning slot (SIGKILL: its data is lost) and
// waits until one of its replicas has taken its slots over, as every live
// node sees it, and the cluster is ok again (about 1.5-3s with
// [ClusterNodeTimeout]). It returns the killed master (see [Cluster.Rejoin])
// and the promoted replica.
func (c *Cluster) KillPrimary(ctx context.Context, slot int64) (old, promoted *Server, err error) {
	if old, err = c.Owner(ctx, slot); err != nil {
		return nil, nil, err
	}
	replicas, err := c.ReplicasOf(ctx, old)
	if err != nil {
		return nil, nil, err
	}
	if len(replicas) == 0 {
		return nil, nil, fmt.Errorf("redistest: %s (slot %d) has no live replica to take over", old, slot)
	}
	if err := old.Kill(); err != nil {
		return nil, nil, err
	}
	if promoted, err = c.WaitNewOwner(ctx, slot, old); err != nil {
		return old, nil, err
	}
	return old, promoted, nil
}

// Rejoin restarts s, a node killed by [Cluster.KillPrimary] (or
// [Server.Kill]), with its cluster configuration (nodes.conf) but no data,
// and waits until it replicates the master that now owns its former slots,
// in sync, and the cluster is ok. Redis makes a returning master whose slots
// were taken over a replica of their new owner; it refuses queries for its
// first seconds meanwhile, so it never serves its stale slots. It returns
// the master s follows.
func (c *Cluster) Rejoin(ctx context.Context, s *Server) (*Server, error) {
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	var master *Server
	err := pollFor(ctx, s.Addr()+" to rejoin as a replica in sync", func(ctx context.Context) (bool, error) {
		r, err := c.Role(ctx, s)
		if err != nil || r.Master == "" || r.State != "connected" {
			return false, err
		}
		for _, n := range c.Nodes() {
			if n.Addr() == r.Master {
				master = n
			}
		}
		if master == nil {
			return false, fmt.Errorf("redistest: %s follows %s, not a node of this cluster", s, r.Master)
		}
		err = c.checkOK(ctx)
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	return master, nil
}

// BlockReplication stops master's replicas from receiving its writes, as a
// replication link that lags behind would: the default user may no longer
// run PSYNC or SYNC on master, and its replicas' connections are closed, so
// they try to reconnect and are refused. The replicas stay replicas (and may
// be promoted, see [Cluster.KillPrimary]); WAIT on master counts none of
// them. [Cluster.AllowReplication] undoes it.
func (c *Cluster) BlockReplication(ctx context.Context, master *Server) error {
	if _, err := master.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync"); err != nil {
		return fmt.Errorf("redistest: %s: ACL SETUSER: %w", master, err)
	}
	if _, err := master.KillClients(ctx, "replica"); err != nil {
		return err
	}
	return pollFor(ctx, master.Addr()+" to have no replica connected", func(ctx context.Context) (bool, error) {
		n, err := onlineReplicas(ctx, master)
		return err == nil && n == 0, err
	})
}

// AllowReplication undoes [Cluster.BlockReplication] and waits until n
// replicas of master are back online (resynchronized).
func (c *Cluster) AllowReplication(ctx context.Context, master *Server, n int) error {
	// PSYNC first, SYNC once they are back: a replica whose PSYNC was refused
	// falls back to SYNC, and one synchronized by SYNC never acknowledges
	// (WAIT would not count it).
	if _, err := master.Do(ctx, "ACL", "SETUSER", "default", "+psync"); err != nil {
		return fmt.Errorf("redistest: %s: ACL SETUSER: %w", master, err)
	}
	if err := WaitReplicas(ctx, master, n); err != nil {
		return err
	}
	if _, err := master.Do(ctx, "ACL", "SETUSER", "default", "+sync"); err != nil {
		return fmt.Errorf("redistest: %s: ACL SETUSER: %w", master, err)
	}
	return nil
}

// WaitSynced waits until every replica master has online has acknowledged
// all that master had written when WaitSynced was called (its
// master_repl_offset then): whatever a failover to one of them promotes, it
// has those writes. Replicas acknowledge once a second by themselves.
func (c *Cluster) WaitSynced(ctx context.Context, master *Server) error {
	info, err := replicationInfo(ctx, master)
	if err != nil {
		return err
	}
	target, err := strconv.ParseInt(info["master_repl_offset"], 10, 64)
	if err != nil {
		return fmt.Errorf("redistest: %s: master_repl_offset %q: %w", master, info["master_repl_offset"], err)
	}
	return pollFor(ctx, fmt.Sprintf("the replicas of %s to reach offset %d", master, target), func(ctx context.Context) (bool, error) {
		info, err := replicationInfo(ctx, master)
		if err != nil {
			return false, err
		}
		for k, v := range info {
			if !strings.HasPrefix(k, "slave") || !strings.Contains(v, "state=online") {
				continue
			}
			for f := range strings.SplitSeq(v, ",") {
				if o, ok := strings.CutPrefix(f, "offset="); ok {
					if n, _ := strconv.ParseInt(o, 10, 64); n < target {
						return false, nil
					}
				}
			}
		}
		return true, nil
	})
}

// WaitNewOwner waits until every live node agrees that a master other than
// old owns slot, that master answers ROLE as one, and the cluster is ok; it
// returns that master. [Cluster.KillPrimary] is Kill and WaitNewOwner; a test
// that must act in between (while the cluster still names the killed master)
// calls them itself.
func (c *Cluster) WaitNewOwner(ctx context.Context, slot int64, old *Server) (*Server, error) {
	var owner *Server
	err := pollFor(ctx, fmt.Sprintf("slot %d to leave %s", slot, old), func(ctx context.Context) (bool, error) {
		if err := c.checkOK(ctx); err != nil {
			return false, err
		}
		o, err := c.Owner(ctx, slot)
		if err != nil || o == old {
			return false, err
		}
		if r, err := c.Role(ctx, o); err != nil || r.Master != "" {
			return false, err // just promoted: a moment more
		}
		owner = o
		return true, nil
	})
	return owner, err
}

// waitFollows waits until replica replicates master, in sync.
func (c *Cluster) waitFollows(ctx context.Context, replica, master *Server) error {
	return pollFor(ctx, fmt.Sprintf("%s to replicate %s, in sync", replica, master), func(ctx context.Context) (bool, error) {
		r, err := c.Role(ctx, replica)
		return err == nil && r.Master == master.Addr() && r.State == "connected", err
	})
}

// replicationInfo returns INFO replication as fields.
func replicationInfo(ctx context.Context, s *Server) (map[string]string, error) {
	msg, err := s.Do(ctx, "INFO", "replication")
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: INFO replication: %w", s, err)
	}
	text, err := msg.ToString()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// onlineReplicas counts the replicas master reports online.
func onlineReplicas(ctx context.Context, master *Server) (int, error) {
	info, err := replicationInfo(ctx, master)
	if err != nil {
		return 0, err
	}
	n := 0
	for k, v := range info {
		if strings.HasPrefix(k, "slave") && strings.Contains(v, "state=online") {
			n++
		}
	}
	return n, nil
}
