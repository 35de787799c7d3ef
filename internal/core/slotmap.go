package core

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// slotMap tells which cluster node serves which slot, as CLUSTER SLOTS last
// said, for the watchdog to send each node's renewals on their own (see
// renewHolds). It only groups: rueidis routes every command by its own slot
// map, so a stale or missing entry costs isolation between nodes, never a
// renewal.
type slotMap struct {
	mu      sync.Mutex
	ranges  []slotRange // sorted by first slot
	fetched time.Time
	failed  bool // the last fetch failed, or a round since saw a failure
}

type slotRange struct {
	first, last uint16
	node        string
}

// slotMapFresh is how long a slot map is trusted without a failure since.
const slotMapFresh = 30 * time.Second

// slotMapTimeout bounds one CLUSTER SLOTS: rueidis sends it to any node, which
// may be the one that hangs; the round goes on with the map it has.
const slotMapTimeout = 200 * time.Millisecond

// node returns the node serving slot, "" when not known.
func (m *slotMap) node(slot uint16) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.ranges), func(i int) bool { return m.ranges[i].last >= slot })
	if i < len(m.ranges) && m.ranges[i].first <= slot {
		return m.ranges[i].node
	}
	return ""
}

// stale reports whether the map is worth fetching again.
func (m *slotMap) stale() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed || m.ranges == nil || time.Since(m.fetched) > slotMapFresh
}

// noteFailure marks the map for a fetch before the next round: a renewal
// failed, perhaps because its slot moved.
func (m *slotMap) noteFailure() {
	m.mu.Lock()
	m.failed = true
	m.mu.Unlock()
}

// refresh asks the cluster for its slots when the map is stale; a failure
// leaves the map as it was.
func (m *slotMap) refresh(ctx context.Context, rc rueidis.Client) {
	if !m.stale() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, slotMapTimeout)
	defer cancel()
	reply, err := rc.Do(ctx, rc.B().ClusterSlots().Build()).ToArray()
	ranges := parseClusterSlots(reply)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil || len(ranges) == 0 {
		m.failed = true
		return
	}
	m.ranges, m.fetched, m.failed = ranges, time.Now(), false
}

// parseClusterSlots reads CLUSTER SLOTS: [first, last, [host, port, ...], replicas...]...
func parseClusterSlots(reply []rueidis.RedisMessage) []slotRange {
	var ranges []slotRange
	for _, r := range reply {
		vals, err := r.ToArray()
		if err != nil || len(vals) < 3 {
			continue
		}
		first, err1 := vals[0].AsInt64()
		last, err2 := vals[1].AsInt64()
		master, err3 := vals[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || first < 0 || last > 16383 || first > last {
			continue
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		ranges = append(ranges, slotRange{uint16(first), uint16(last), net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].first < ranges[j].first })
	return ranges
}
