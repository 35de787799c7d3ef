package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
)

// The cluster points (-scenarios cluster) run on throwaway Redis Clusters
// the bench starts besides its own server: a 1-master and a 3-master
// cluster (no replicas), each node a redis-server on a free loopback port
// with a bus port of its own (redistest.StartCluster).
//
//   - cluster-locks: many distinct locks, -cluster-goroutines goroutines over
//     -cluster-procs worker processes (one Client each), on the bench's own
//     server, on the 1-master and on the 3-master cluster: does throughput
//     grow with the shards? For each count s of -cluster-sharing, every lock
//     is used by s goroutines, each in another process: with 1 every
//     acquisition is uncontended (the Redis work of a lock and an unlock,
//     the load sharding spreads), with 2 locks change hands between
//     processes (hand-offs, pub/sub messages).
//   - cluster-hot: one lock, -cluster-hot-procs worker processes with one
//     Client and one goroutine each, on the bench's own server and on the
//     3-master cluster: what does the cluster cost a hand-off?
//
// At every point on a cluster the bench sums, over the nodes, the publish
// messages sent over the cluster bus (CLUSTER INFO
// cluster_stats_messages_publish_sent, and publishshard_sent, which Redis 7
// sends to the replicas of a shard on SPUBLISH): with sharded pub/sub a
// release's message stays on its master, with classic pub/sub each PUBLISH
// is broadcast to every other node. The rlock-classic contender forces
// classic pub/sub, for comparison.

// Targets of the points.
const (
	targetOwn      = ""         // the bench's own server (or REDIS_ADDR)
	targetCluster1 = "cluster1" // a Redis Cluster of 1 master
	targetCluster3 = "cluster3" // a Redis Cluster of 3 masters
)

// clusterMasters is how many masters each cluster target has.
var clusterMasters = map[string]int{targetCluster1: 1, targetCluster3: 3}

// describeTarget names a target in the points' configuration lines.
func describeTarget(name string) string {
	if n, ok := clusterMasters[name]; ok {
		return fmt.Sprintf("a Redis Cluster of %d master(s), no replicas, every node a redis-server on loopback", n)
	}
	return "one standalone redis-server"
}

// clusterContenders are the contenders that run at the cluster points, in
// this order: the ones that take a cluster client (Contender.Cluster);
// rlock-classic only on a cluster, where its pub/sub differs from rlock's.
func clusterContenders(target string) []string {
	if target == targetOwn {
		return []string{"rlock", "spin"}
	}
	return []string{"rlock", "rlock-classic", "spin"}
}

// target is a Redis the points run on.
type target struct {
	name  string
	addr  string           // a node (the only one of a standalone server)
	seeds []string         // a cluster's masters; nil for a standalone server
	nodes []rueidis.Client // uncounted single-node clients: INFO, CLUSTER INFO
	// cluster is the cluster the bench started; nil for its own server.
	cluster *redistest.Cluster
}

// startClusterTarget starts a cluster of masters masters and connects to
// every node.
func startClusterTarget(ctx context.Context, name string, masters int) (*target, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := redistest.StartCluster(ctx, masters, 0)
	if err != nil {
		return nil, fmt.Errorf("start a %d-master cluster: %w", masters, err)
	}
	t := &target{name: name, addr: c.Masters[0].Addr(), cluster: c}
	for _, m := range c.Masters {
		t.seeds = append(t.seeds, m.Addr())
	}
	for _, n := range c.Nodes() {
		rc, err := newRawClient(n.Addr(), nil)
		if err != nil {
			t.close()
			return nil, err
		}
		t.nodes = append(t.nodes, rc)
	}
	return t, nil
}

// close disconnects, and stops the cluster the bench started.
func (t *target) close() error {
	for _, rc := range t.nodes {
		rc.Close()
	}
	t.nodes = nil
	if t.cluster != nil {
		return t.cluster.Close()
	}
	return nil
}

// snapshot reads every node's INFO commandstats and cpu, and on a cluster
// its bus counters.
func (t *target) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{commands: map[string]int64{}}
	if t.cluster != nil {
		s.bus = map[string]int64{}
	}
	for _, rc := range t.nodes {
		text, err := rc.Do(ctx, rc.B().Info().Section("commandstats", "cpu").Build()).ToString()
		if err != nil {
			return s, fmt.Errorf("INFO: %w", err)
		}
		if err := s.addInfo(text); err != nil {
			return s, err
		}
		if t.cluster == nil {
			continue
		}
		text, err = rc.Do(ctx, rc.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return s, fmt.Errorf("CLUSTER INFO: %w", err)
		}
		if err := addBusCounters(s.bus, text); err != nil {
			return s, err
		}
	}
	s.at = mono()
	return s, nil
}

// Bus message types counted (CLUSTER INFO cluster_stats_messages_<type>_sent,
// a line Redis leaves out while its count is 0).
const (
	busPublish      = "publish"
	busPublishShard = "publishshard"
)

// addBusCounters adds the publish and publishshard messages a node sent, as
// its CLUSTER INFO text tells, to bus.
func addBusCounters(bus map[string]int64, text string) error {
	text = strings.TrimPrefix(text, "txt:") // a RESP3 verbatim string's format
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		for _, typ := range []string{busPublish, busPublishShard} {
			if k == "cluster_stats_messages_"+typ+"_sent" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("CLUSTER INFO line %q: %w", line, err)
				}
				bus[typ] += n
			}
		}
	}
	return nil
}

// openTargets connects to the bench's own server and starts the clusters
// the points need. On error, what was started is closed.
func (b *bench) openTargets(ctx context.Context, points []Point) error {
	b.targets = map[string]*target{targetOwn: {name: targetOwn, addr: b.addr, nodes: []rueidis.Client{b.raw}}}
	for _, pt := range points {
		n, ok := clusterMasters[pt.Target]
		if !ok || b.targets[pt.Target] != nil {
			continue
		}
		t, err := startClusterTarget(ctx, pt.Target, n)
		if err != nil {
			return errors.Join(err, b.closeTargets())
		}
		b.targets[pt.Target] = t
		fmt.Printf("started %s: %s\n", pt.Target, strings.Join(t.seeds, ", "))
	}
	return nil
}

// closeTargets stops the clusters (the bench's own server and raw client
// are closed by their owner).
func (b *bench) closeTargets() error {
	var errs []error
	for name, t := range b.targets {
		if name != targetOwn {
			errs = append(errs, t.close())
		}
	}
	b.targets = nil
	return errors.Join(errs...)
}

// Defaults of the cluster points.
const (
	clusterLocksHold = 0                // cluster-locks: the lock itself is the work
	clusterHotHold   = time.Millisecond // cluster-hot
)

// clusterPoints returns the cluster points, in the order they run in each
// round.
func clusterPoints(cfg config) []Point {
	var pts []Point
	n, g := cfg.clusterProcs, cfg.clusterG
	for _, share := range cfg.clusterSharing {
		// Goroutine i uses lock i % locks, and each process runs g/n
		// consecutive goroutines, at most locks of them (g is a multiple of
		// n x share): the share users of a lock are in share processes.
		locks := g / share
		for _, tg := range []string{targetOwn, targetCluster1, targetCluster3} {
			pts = append(pts, Point{Scenario: "cluster-locks", Target: tg, Contenders: clusterContenders(tg),
				Label:   fmt.Sprintf("cluster-locks %s %dp/%dg %d locks hold %s", shortTarget(tg), n, g, locks, fmtHold(clusterLocksHold)),
				Workers: n, ClientsPerWorker: 1, Goroutines: g, Locks: locks, Hold: clusterLocksHold, Duration: cfg.clusterDur})
		}
	}
	h := cfg.clusterHotProcs
	for _, tg := range []string{targetOwn, targetCluster3} {
		pts = append(pts, Point{Scenario: "cluster-hot", Target: tg, Contenders: clusterContenders(tg),
			Label:   fmt.Sprintf("cluster-hot %s %dp/%dg hold %s", shortTarget(tg), h, h, fmtHold(clusterHotHold)),
			Workers: h, ClientsPerWorker: 1, Goroutines: h, Locks: 1, Hold: clusterHotHold, Duration: cfg.clusterDur})
	}
	return pts
}

// shortTarget names a target in point labels.
func shortTarget(name string) string {
	if n, ok := clusterMasters[name]; ok {
		return strconv.Itoa(n) + "m"
	}
	return "standalone"
}

// isClusterPoint tells the points of -scenarios cluster.
func isClusterPoint(p Point) bool { return strings.HasPrefix(p.Scenario, "cluster-") }
