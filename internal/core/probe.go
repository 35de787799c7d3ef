package core

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
)

// ProbeName is the name under the key prefix that Probe checks rights on: its
// keys and channels are those of a Mutex and a semaphore called so.
const ProbeName = "probe"

// ProbeFor names the commands Probe checks beyond those every Client runs.
type ProbeFor struct {
	// Sharded: the multiplexer subscribes with sharded pub/sub, so check
	// SPUBLISH, SSUBSCRIBE and SUNSUBSCRIBE instead of PUBLISH, SUBSCRIBE and
	// UNSUBSCRIBE.
	Sharded bool
	// Wait: acquisitions wait for replicas (rlock.WithReplicaAck): check WAIT.
	Wait bool
}

// ErrReadOnlyReplica is Probe's refusal when the client sends the scripts to a
// read-only replica (rueidis's ReplicaOnly option): no lock could be taken.
var ErrReadOnlyReplica = errors.New("the rueidis client sends commands to a read-only replica (its ReplicaOnly option?): the locks write, and need the master")

// Probe asks Redis, in one script call that changes no key, whether the
// client's ACL user may run every command the module's scripts and clients
// run on keys and channels under prefix, with the options for names. It
// returns the denied commands (upper case), or, when the probe itself is
// refused (NOPERM: EVALSHA, EVAL or the probe's keys denied), the refusal, or
// ErrReadOnlyReplica. When the user may not run the scripts as Redis
// functions (FCALL or FUNCTION LOAD denied), which is no denial, it tells
// rc's Runner to run them by EVALSHA from now on (see lua.Runner).
// Any other failure (Redis unreachable, a timeout, a server without ACLs or
// without redis.acl_check_cmd, before Redis 7) yields neither: the probe
// cannot tell, and the locks will report what goes wrong when they are used.
func Probe(ctx context.Context, c *Client, prefix string, f ProbeFor) (denied []string, refusal error) {
	rc := c.RC
	base := Base(prefix, ProbeName)
	keys := []string{base, base + ":sem"}
	pubsub := "classic"
	if f.Sharded {
		pubsub = "sharded"
	}
	args := []string{pubsub, flag(f.Wait), base + ":unlock", GrantChannel(base, "probe"), GrantChannel(base+":sem", "probe")}
	names, err := lua.Probe.Exec(ctx, rc, keys, args).AsStrSlice()
	if err == nil && len(names) == 1 && names[0] == "-replica" {
		return nil, ErrReadOnlyReplica
	}
	if err == nil {
		if n := len(names); n > 0 && names[n-1] == "-functions" {
			c.Scripts.EvalOnly()
			names = names[:n-1]
		}
		return names, nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "NOPERM") {
		return nil, re
	}
	return nil, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
