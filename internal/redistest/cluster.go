package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ClusterNodeTimeout is the cluster-node-timeout of a test cluster: a master
// that does not answer for this long is suspected failing, and its replica
// takes over (a killed master's replica wins the election about 1.5-3s after
// the kill).
const ClusterNodeTimeout = time.Second

// Cluster is a throwaway Redis Cluster made of redis-server processes on
// 127.0.0.1: masters share the 16384 slots in equal ranges, each with its
// replicas. Every node is an owned [Server] (Kill, Pause, Do, INFO...).
type Cluster struct {
	// Masters are the nodes given slots at start, in slot order: Masters[0]
	// owns the lowest range. After a failover or a migration they may no
	// longer be masters, or own those slots; see [Cluster.Owner].
	Masters []*Server
	// Replicas[i] are the replicas started for Masters[i].
	Replicas [][]*Server
	busPorts []int
}

// Nodes returns every node: masters first, then replicas.
func (c *Cluster) Nodes() []*Server {
	nodes := append([]*Server(nil), c.Masters...)
	for _, rs := range c.Replicas {
		nodes = append(nodes, rs...)
	}
	return nodes
}

// StartCluster starts a cluster of masters masters with replicas replicas
// each and returns once every node reports cluster_state:ok and knows every
// other node, and every replica is in sync with its master. opts apply to every node (after the cluster settings, which
// cannot be overridden sensibly). Each node's cluster bus listens on a port
// of its own, reserved like the client port (--cluster-port), so that the
// default bus port (port+10000) can never overflow. The caller must call
// [Cluster.Close].
func StartCluster(ctx context.Context, masters, replicas int, opts ...Option) (*Cluster, error) {
	if masters < 1 || masters > 16384 {
		return nil, fmt.Errorf("redistest: a cluster needs 1 to 16384 masters, got %d", masters)
	}
	if replicas < 0 {
		return nil, fmt.Errorf("redistest: replicas must not be negative, got %d", replicas)
	}
	cfg := newConfig(opts)
	bin, err := exec.LookPath(cfg.binary)
	if err != nil {
		return nil, fmt.Errorf("redistest: a cluster needs redis-server on PATH: %w", err)
	}
	cfg.binary = bin
	c := &Cluster{}
	total := masters * (1 + replicas)
	nodes, err := startN(ctx, total, func(ctx context.Context) (*Server, error) {
		bus, err := reservePort()
		if err != nil {
			return nil, fmt.Errorf("redistest: pick a cluster bus port: %w", err)
		}
		nodeCfg := cfg
		nodeCfg.args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-require-full-coverage", "yes",
			// A replica may take over however long its link was down (a
			// test may have cut it on purpose, see BlockReplication).
			"--cluster-replica-validity-factor", "0",
			// Full syncs at once (the default waits 5s for more replicas).
			"--repl-diskless-sync-delay", "0",
		}, cfg.args...)
		s, err := startProcess(ctx, nodeCfg)
		if err != nil {
			releasePort(bus)
			return nil, err
		}
		release := s.release
		s.release = func() {
			release()
			releasePort(bus)
		}
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	c.Masters = nodes[:masters]
	for i := range masters {
		start := masters + i*replicas
		c.Replicas = append(c.Replicas, nodes[start:start+replicas])
	}
	if err := c.form(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// form assigns slots, introduces the nodes, attaches the replicas and waits
// for the cluster to be ok everywhere.
func (c *Cluster) form(ctx context.Context) error {
	n := len(c.Masters)
	for i, m := range c.Masters {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if _, err := m.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("redistest: %s: CLUSTER ADDSLOTSRANGE: %w", m, err)
		}
	}
	first := c.Masters[0]
	for _, s := range c.Nodes()[1:] {
		port, bus, err := c.ports(ctx, s)
		if err != nil {
			return err
		}
		if _, err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, bus); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", s, err)
		}
	}
	for i, rs := range c.Replicas {
		id, err := c.NodeID(ctx, c.Masters[i])
		if err != nil {
			return err
		}
		for _, r := range rs {
			// A replica must know its master (gossip) before REPLICATE.
			if err := poll(ctx, func() error {
				_, err := r.Do(ctx, "CLUSTER", "REPLICATE", id)
				return err
			}); err != nil {
				return fmt.Errorf("redistest: %s: CLUSTER REPLICATE: %w", r, err)
			}
		}
	}
	if err := c.WaitOK(ctx); err != nil {
		return err
	}
	for i, rs := range c.Replicas {
		if len(rs) > 0 {
			if err := WaitReplicas(ctx, c.Masters[i], len(rs)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ports returns s's client port and cluster bus port.
func (c *Cluster) ports(ctx context.Context, s *Server) (string, string, error) {
	_, port, _ := strings.Cut(s.Addr(), ":")
	msg, err := s.Do(ctx, "CONFIG", "GET", "cluster-port")
	if err != nil {
		return "", "", fmt.Errorf("redistest: %s: CONFIG GET cluster-port: %w", s, err)
	}
	kv, err := msg.AsStrMap()
	if err != nil || kv["cluster-port"] == "" {
		return "", "", fmt.Errorf("redistest: %s: CONFIG GET cluster-port: %v %v", s, kv, err)
	}
	return port, kv["cluster-port"], nil
}

// NodeID returns s's cluster node id.
func (c *Cluster) NodeID(ctx context.Context, s *Server) (string, error) {
	msg, err := s.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: %s: CLUSTER MYID: %w", s, err)
	}
	return msg.ToString()
}

// WaitOK waits until every live node reports cluster_state:ok, knows every
// node, sees all slots assigned, and agrees with the others on who owns
// which slot (CLUSTER SLOTS).
func (c *Cluster) WaitOK(ctx context.Context) error {
	return poll(ctx, func() error { return c.checkOK(ctx) })
}

// checkOK is one check of WaitOK.
func (c *Cluster) checkOK(ctx context.Context) error {
	var first string
	for _, s := range c.Nodes() {
		if !s.live() {
			continue
		}
		info, err := c.Info(ctx, s)
		if err != nil {
			return err
		}
		if info["cluster_state"] != "ok" || info["cluster_slots_assigned"] != "16384" {
			return fmt.Errorf("redistest: %s: cluster_state %s, slots assigned %s", s, info["cluster_state"], info["cluster_slots_assigned"])
		}
		slots, err := c.slotOwners(ctx, s)
		if err != nil {
			return err
		}
		if first == "" {
			first = slots
		} else if slots != first {
			return fmt.Errorf("redistest: %s sees other slot owners", s)
		}
	}
	return nil
}

// slotOwners renders CLUSTER SLOTS as "lo-hi=addr ..." (masters only).
func (c *Cluster) slotOwners(ctx context.Context, s *Server) (string, error) {
	msg, err := s.Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return "", fmt.Errorf("redistest: %s: CLUSTER SLOTS: %w", s, err)
	}
	ranges, err := msg.ToArray()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return "", fmt.Errorf("redistest: %s: CLUSTER SLOTS entry %v: %v", s, r, err)
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		node, _ := f[2].ToArray()
		var addr []string
		for _, x := range node[:min(2, len(node))] {
			if v, err := x.ToString(); err == nil {
				addr = append(addr, v)
			} else if v, err := x.AsInt64(); err == nil {
				addr = append(addr, strconv.FormatInt(v, 10))
			}
		}
		parts = append(parts, fmt.Sprintf("%d-%d=%s", lo, hi, strings.Join(addr, ":")))
	}
	return strings.Join(parts, " "), nil
}

// Info returns CLUSTER INFO of s as fields.
func (c *Cluster) Info(ctx context.Context, s *Server) (map[string]string, error) {
	msg, err := s.Do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: CLUSTER INFO: %w", s, err)
	}
	text, err := msg.ToString()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	text = strings.TrimPrefix(text, "txt:") // a RESP3 verbatim string's format
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// Owner returns the node that owns slot, as the first live node sees it.
func (c *Cluster) Owner(ctx context.Context, slot int64) (*Server, error) {
	for _, s := range c.Nodes() {
		if !s.live() {
			continue
		}
		owners, err := c.slotOwners(ctx, s)
		if err != nil {
			return nil, err
		}
		for _, part := range strings.Fields(owners) {
			rng, addr, _ := strings.Cut(part, "=")
			los, his, _ := strings.Cut(rng, "-")
			lo, _ := strconv.ParseInt(los, 10, 64)
			hi, _ := strconv.ParseInt(his, 10, 64)
			if slot >= lo && slot <= hi {
				for _, n := range c.Nodes() {
					if n.Addr() == addr {
						return n, nil
					}
				}
				return nil, fmt.Errorf("redistest: slot %d is owned by %s, not a node of this cluster", slot, addr)
			}
		}
		return nil, fmt.Errorf("redistest: slot %d has no owner", slot)
	}
	return nil, errors.New("redistest: no live node")
}

// SlotToMove returns the slot of key, the master that serves it, and
// another master to move it to (with MoveSlot).
func (c *Cluster) SlotToMove(ctx context.Context, key string) (slot int64, from, to *Server, err error) {
	if slot, err = c.KeySlot(ctx, key); err != nil {
		return 0, nil, nil, err
	}
	if from, err = c.Owner(ctx, slot); err != nil {
		return 0, nil, nil, err
	}
	for _, m := range c.Masters {
		if m != from {
			return slot, from, m, nil
		}
	}
	return 0, nil, nil, fmt.Errorf("redistest: no master but %s to move slot %d to", from, slot)
}

// KeySlot returns the cluster slot of key (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(ctx context.Context, key string) (int64, error) {
	for _, s := range c.Nodes() {
		if s.live() {
			msg, err := s.Do(ctx, "CLUSTER", "KEYSLOT", key)
			if err != nil {
				return 0, err
			}
			return msg.AsInt64()
		}
	}
	return 0, errors.New("redistest: no live node")
}

// Client returns a new rueidis cluster client seeded with every master; the
// caller closes it.
func (c *Cluster) Client(opts ...func(*rueidis.ClientOption)) (rueidis.Client, error) {
	o := rueidis.ClientOption{}
	for _, m := range c.Masters {
		o.InitAddress = append(o.InitAddress, m.Addr())
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redistest: cluster client: %w", err)
	}
	return rc, nil
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.Nodes() {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// NewCluster starts a cluster for a test (see [StartCluster]) and closes it
// at cleanup. It never uses $REDIS_ADDR nor Docker: it needs redis-server on
// PATH, and fails the test without it.
func NewCluster(tb testing.TB, masters, replicas int, opts ...Option) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	c, err := StartCluster(ctx, masters, replicas, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return c
}

// ClusterClient returns a new rueidis cluster client for c that is closed at
// cleanup.
func ClusterClient(tb testing.TB, c *Cluster, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	rc, err := c.Client(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	return rc
}

// ClusterClientWithReplicas is ClusterClient once the client lists every
// node of c, replicas included: rueidis learns the replicas from CLUSTER
// SLOTS when it starts, and a cluster just formed may not list them yet
// (while they sync). Clients made before that are closed and made again.
func ClusterClientWithReplicas(tb testing.TB, c *Cluster, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rc rueidis.Client
	err := poll(ctx, func() error {
		var err error
		if rc, err = c.Client(opts...); err != nil {
			return err
		}
		for _, s := range c.Nodes() {
			if rc.Nodes()[s.Addr()] == nil {
				rc.Close()
				return fmt.Errorf("the client does not list %s yet", s.Addr())
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	return rc
}

// poll runs f every 20ms until it succeeds or ctx ends (then the last error
// is returned with ctx's).
func poll(ctx context.Context, f func() error) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// live reports whether s runs and is not paused.
func (s *Server) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateRunning
}

// MoveSlot migrates slot to the master to, the way an operator reshards:
// IMPORTING on to, MIGRATING on the owner, MIGRATE of every key in the slot,
// then SETSLOT NODE on to, the former owner and the other masters, and waits
// for the cluster to agree ([Cluster.WaitOK]). Between MIGRATING and NODE,
// pass between (may be nil): it runs with the slot half-migrated.
func (c *Cluster) MoveSlot(ctx context.Context, slot int64, to *Server, between func() error) error {
	from, err := c.Owner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistest: slot %d already lives on %s", slot, to)
	}
	fromID, err := c.NodeID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := c.NodeID(ctx, to)
	if err != nil {
		return err
	}
	s := strconv.FormatInt(slot, 10)
	if _, err := to.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("redistest: %s: SETSLOT IMPORTING: %w", to, err)
	}
	if _, err := from.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return fmt.Errorf("redistest: %s: SETSLOT MIGRATING: %w", from, err)
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	_, port, _ := strings.Cut(to.Addr(), ":")
	for {
		msg, err := from.Do(ctx, "CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			return fmt.Errorf("redistest: %s: GETKEYSINSLOT: %w", from, err)
		}
		keys, err := msg.AsStrSlice()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := append([]string{"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"}, keys...)
		if _, err := from.Do(ctx, args...); err != nil {
			return fmt.Errorf("redistest: %s: MIGRATE: %w", from, err)
		}
	}
	for _, m := range append([]*Server{to, from}, c.Masters...) {
		if !m.live() {
			continue
		}
		// Replicas refuse SETSLOT; gossip informs them.
		if _, err := m.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", toID); err != nil && !strings.Contains(err.Error(), "replica") {
			return fmt.Errorf("redistest: %s: SETSLOT NODE: %w", m, err)
		}
	}
	return c.WaitOK(ctx)
}
