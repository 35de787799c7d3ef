package rlock

import (
	"strings"

	"github.com/relockio/relock/internal/core"
)

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

// keySuffixes are what each key of a lock adds to its base, in the order
// newKeys lays them out.
var keySuffixes = [...]string{"", ":fence", ":queue", ":waiters", ":seq", ":unlock", ":to:"}

// newKeys names the keys of the lock name for the Client clientID. A Mutex is
// often made for one Lock (a lock per entity), so they are cut from one
// string: one allocation where there would be eight.
func newKeys(prefix, name, clientID string) keys {
	base := core.Base(prefix, name)
	n := len(base)*(len(keySuffixes)+1) + len(clientID) + len(":to:")
	for _, s := range keySuffixes {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	cut := func(suffix ...string) string {
		start := b.Len()
		b.WriteString(base)
		for _, s := range suffix {
			b.WriteString(s)
		}
		return b.String()[start:]
	}
	k := keys{
		lock:        cut(),
		fence:       cut(keySuffixes[1]),
		queue:       cut(keySuffixes[2]),
		waiters:     cut(keySuffixes[3]),
		seq:         cut(keySuffixes[4]),
		channel:     cut(keySuffixes[5]),
		grantPrefix: cut(keySuffixes[6]),
		grants:      cut(keySuffixes[6], clientID),
	}
	return k
}

// gate is a quorum lock's reservation on its gate master (see
// quorum_acquire.lua).
func (k keys) gate() string { return k.lock + ":gate" }

// latch is the result key of one release request (see release.lua).
func (k keys) latch(requestID string) string { return k.lock + ":latch:" + requestID }

// tombstone marks an abandoned owner field (see abandon.lua).
func (k keys) tombstone(owner string) string { return k.lock + ":gone:" + owner }
