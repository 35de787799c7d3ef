package rlock

import "github.com/relockio/relock/internal/core"

// MaxNameLength is the longest lock name accepted, in bytes.
const MaxNameLength = core.MaxNameLength

// keys names everything one lock owns in Redis. All of it shares the hash tag
// {name}, so it lives in one Redis Cluster slot and one script may touch it all.
type keys struct {
	lock    string // hash: owner field -> hold count; 't' -> its token, 'c' -> its claim (see publish_lib.lua)
	fence   string // fencing counter, kept a lease past its last token (see fence_lib.lua)
	queue   string // zset: waiting owner field -> arrival number
	waiters string // zset: waiting owner field -> deadline
	seq     string // arrival counter; expires with the queue, after its last deadline
	channel string // "free" announcements, when no one is queued
	// grants is this Client's grant channel: hand-offs to its waiters, and
	// ForceUnlock's word to its holders, come on it (see core.GrantChannel);
	// grantPrefix is that of every Client.
	grants      string
	grantPrefix string
}

func newKeys(prefix, name, clientID string) keys {
	base := core.Base(prefix, name)
	return keys{
		grants:      core.GrantChannel(base, clientID),
		grantPrefix: core.GrantChannelPrefix(base),
		lock:        base,
		fence:       base + ":fence",
		queue:       base + ":queue",
		waiters:     base + ":waiters",
		seq:         base + ":seq",
		channel:     base + ":unlock",
	}
}

// latch is the result key of one release request (see release.lua).
func (k keys) latch(requestID string) string { return k.lock + ":latch:" + requestID }

// tombstone marks an abandoned owner field (see abandon.lua).
func (k keys) tombstone(owner string) string { return k.lock + ":gone:" + owner }
