package lua

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// Pinned is a script run on a connection chosen by the caller (a
// rueidis.DedicatedClient), for callers that must send a command after it on
// the same connection: WAIT counts the replicas that acknowledged the writes
// of the connection it is sent on.
type Pinned struct {
	src  string
	sha1 string
}

func newPinned(src string) *Pinned {
	sum := sha1.Sum([]byte(src))
	return &Pinned{src: src, sha1: hex.EncodeToString(sum[:])}
}

// AcquireOn is Acquire, to be run with Pinned.Exec.
var AcquireOn = newPinned(acquireScriptSrc)

// Exec runs the script on dc: EVALSHA, then EVAL when the server does not
// know the script yet.
func (p *Pinned) Exec(ctx context.Context, dc rueidis.DedicatedClient, keys, args []string) rueidis.RedisResult {
	n := int64(len(keys))
	resp := dc.Do(ctx, dc.B().Evalsha().Sha1(p.sha1).Numkeys(n).Key(keys...).Arg(args...).Build())
	if err, ok := rueidis.IsRedisErr(resp.Error()); ok && err.IsNoScript() {
		resp = dc.Do(ctx, dc.B().Eval().Script(p.src).Numkeys(n).Key(keys...).Arg(args...).Build())
	}
	return resp
}

// RWAcquireOn, SemAcquireOn and QuorumAcquireOn are RWAcquire, SemAcquire and
// QuorumAcquire, to be run with Pinned.Exec (WithReplicaAck).
var (
	RWAcquireOn     = newPinned(script(rwLibSrc, rwAcquireSrc))
	SemAcquireOn    = newPinned(script(semLibSrc, semAcquireSrc))
	QuorumAcquireOn = newPinned(script(publishLibSrc, quorumAcquireSrc))
)
