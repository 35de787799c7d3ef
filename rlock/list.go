package rlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
)

// Listed is a lock that Client.List found: its name and its kind, "mutex",
// "rw" (an RWMutex) or "semaphore". A name used for several kinds is listed
// once per kind.
type Listed struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// listSuffixes map the key that marks a lock as present (held, or waited
// for; a semaphore's state hash, present while its limit is) to its kind.
var listSuffixes = map[string]string{
	"": "mutex", ":queue": "mutex",
	":rw": "rw", ":rw:r": "rw", ":rw:queue": "rw",
	":sem": "semaphore", ":sem:queue": "semaphore",
}

// List lists the locks of the Client's key prefix whose names start with
// prefix, one SCAN step (never KEYS) per call: pass "" as cursor first, then
// the next cursor returned, until it is "". count is SCAN's COUNT hint (100
// when not positive, at most 10000): a call may return fewer locks, or none,
// and the total work per call stays bounded. As with SCAN, a lock present
// throughout the iteration is listed at least once; one that comes or goes
// meanwhile may or may not be; a name may come back in more than one call.
// On a Redis Cluster the cursor walks the masters one after another. A
// prefix that no lock name could start with (braces, invalid UTF-8, over
// MaxNameLength) or a malformed cursor is an error matching ErrInvalidName or
// ErrInvalidOption, as is a nil ctx; a closed Client's is ErrClosed.
func (c *Client) List(ctx context.Context, prefix, cursor string, count int) ([]Listed, string, error) {
	switch {
	case ctx == nil:
		return nil, "", fmt.Errorf("%w: nil context", ErrInvalidOption)
	case c.c == nil:
		return nil, "", errZero("Client", "New")
	case c.c.IsClosed():
		return nil, "", ErrClosed
	}
	if prefix != "" {
		if err := core.ValidateName(prefix, ErrInvalidName); err != nil {
			return nil, "", err
		}
	}
	node, cur, err := parseListCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	if count <= 0 {
		count = 100
	}
	base := core.Base(c.c.Cfg.KeyPrefix, "")
	base = base[:len(base)-1] // "<key prefix>:{"
	return c.listStep(ctx, base, base+globEscape(prefix)+"*", node, cur, min(count, 10000))
}

func parseListCursor(cursor string) (node int, cur uint64, err error) {
	if cursor == "" {
		return 0, 0, nil
	}
	n, c, ok := strings.Cut(cursor, ":")
	node, nerr := strconv.Atoi(n)
	cur, cerr := strconv.ParseUint(c, 10, 64)
	if !ok || nerr != nil || cerr != nil || node < 0 {
		return 0, 0, fmt.Errorf("%w: malformed List cursor %q", ErrInvalidOption, cursor)
	}
	return node, cur, nil
}

// listStep runs one SCAN on the node'th master (the only node, unless on a
// cluster) and returns what it found and the cursor after it.
func (c *Client) listStep(ctx context.Context, base, pattern string, node int, cur uint64, count int) ([]Listed, string, error) {
	rc, n, err := c.listNode(ctx, node)
	if err != nil {
		return nil, "", err
	}
	var e rueidis.ScanEntry // a replica's: nothing, and on to the next node
	if rc != nil {
		e, err = rc.Do(ctx, rc.B().Scan().Cursor(cur).Match(pattern).Count(int64(count)).Build()).AsScanEntry()
		if err != nil {
			return nil, "", fmt.Errorf("rlock: list: %w", err)
		}
	}
	next := ""
	switch {
	case e.Cursor != 0:
		next = fmt.Sprintf("%d:%d", node, e.Cursor)
	case node+1 < n:
		next = fmt.Sprintf("%d:0", node+1)
	}
	return listedOf(base, e.Elements), next, nil
}

// listNode returns the client of the node'th node to scan and the number of
// nodes; on a cluster, a replica is skipped (nil) as it holds its master's
// keys.
func (c *Client) listNode(ctx context.Context, node int) (rueidis.Client, int, error) {
	rc := c.c.RC
	if rc.Mode() != rueidis.ClientModeCluster {
		return rc, 1, nil
	}
	nodes := rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	if node >= len(addrs) {
		return nil, 0, fmt.Errorf("%w: List cursor past the cluster's %d nodes", ErrInvalidOption, len(addrs))
	}
	nc := nodes[addrs[node]]
	role, err := nc.Do(ctx, nc.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return nil, 0, fmt.Errorf("rlock: list: role of %s: %w", addrs[node], err)
	}
	if r, _ := role[0].ToString(); r != "master" {
		return nil, len(addrs), nil
	}
	return nc, len(addrs), nil
}

func listedOf(base string, keys []string) []Listed {
	seen := map[Listed]bool{}
	var out []Listed
	for _, k := range keys {
		name, suffix, ok := strings.Cut(strings.TrimPrefix(k, base), "}")
		kind, known := listSuffixes[suffix]
		if !ok || !known || !strings.HasPrefix(k, base) || seen[Listed{name, kind}] {
			continue
		}
		seen[Listed{name, kind}] = true
		out = append(out, Listed{name, kind})
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.Name+"\x00"+a.Kind, b.Name+"\x00"+b.Kind) })
	return out
}

// globEscape escapes the glob characters of SCAN's MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
