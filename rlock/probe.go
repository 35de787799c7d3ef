package rlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relockio/relock/internal/core"
)

// ErrPermission reports that the Redis user of the rueidis client may not run
// commands the locks need (see WithProbe); the error names them. A lock
// operation refused a command for the user (an ACL changed after New) fails
// with an error matching it too, naming the command; the script refused
// changed nothing (Redis 7 and later, see WithProbe).
var ErrPermission = core.ErrPermission

// Probe settings (see WithProbe and WithProbeTimeout).
const (
	// DefaultProbeTimeout bounds the permission probe of New.
	DefaultProbeTimeout = time.Second
	// MinProbeTimeout and MaxProbeTimeout bound WithProbeTimeout: New blocks
	// its caller up to this long when Redis does not answer.
	MinProbeTimeout = time.Millisecond
	MaxProbeTimeout = time.Minute
)

// WithProbe turns New's permission probe on or off. With it on (the default),
// New runs one script (EVALSHA, plus EVAL the first time) that asks Redis,
// with redis.acl_check_cmd, whether the client's ACL user may run every
// command the locks and semaphores run (EVALSHA, EVAL, PEXPIRE, HSET, DEL,
// PUBLISH, SUBSCRIBE...) on keys and channels under the key prefix (those of
// a lock named "probe"); it runs none of them. The pub/sub
// commands checked are those the Client's multiplexer uses: SPUBLISH,
// SSUBSCRIBE and SUNSUBSCRIBE when it is sharded (see pubsub.WithSharding; on
// a Redis 7 cluster by default), else PUBLISH, SUBSCRIBE and UNSUBSCRIBE;
// with WithReplicaAck, WAIT is checked too. New then
// fails with an error matching ErrPermission that names the denied commands,
// instead of scripts failing halfway later with only "@user_script:N". The
// same script deletes a key that never exists (writing nothing): a server
// that refuses it as a read-only replica (a rueidis client made with
// ReplicaOnly, which sends every command to replicas) fails New with an error
// matching ErrInvalidOption, as no lock could ever be taken through it. The
// probe also asks whether the user may run FCALL and FUNCTION LOAD; when not,
// which is no denial, the Client runs the lock scripts by EVALSHA instead of
// as Redis functions (see WithRedisFunctions), without trying.
//
// Only a definite denial fails New. When Redis is unreachable, slow (see
// WithProbeTimeout), or cannot tell (Redis before 7 has no acl_check_cmd),
// New succeeds and says nothing: the locks report connection errors when
// used. Keys or channels of other names can still be denied by narrower ACL
// patterns than the prefix.
func WithProbe(on bool) Option {
	return func(c *config) { c.probe = on }
}

// WithProbeTimeout bounds New's permission probe (see WithProbe). Default
// DefaultProbeTimeout (1s); allowed MinProbeTimeout (1ms) to MaxProbeTimeout
// (1m).
func WithProbeTimeout(d time.Duration) Option {
	return func(c *config) { c.probeTimeout = d }
}

// probeRights runs the permission probe for New on cc's connections: an error
// matching ErrPermission when the user is denied something, else nil.
func (c *config) probeRights(cc *core.Client) error {
	if !c.probe {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.probeTimeout)
	defer cancel()
	// Which pub/sub the locks will use: under pubsub.ShardingAuto on a
	// cluster client this asks the server (INFO), as the first lock would.
	sharded, err := cc.Mux.Sharded(ctx)
	if err != nil {
		return nil // Redis did not answer in time: the probe cannot tell
	}
	denied, refusal := core.Probe(ctx, cc, c.keyPrefix, core.ProbeFor{Sharded: sharded, Wait: c.ackSet})
	switch {
	case errors.Is(refusal, core.ErrReadOnlyReplica):
		return fmt.Errorf("%w: %w", ErrInvalidOption, refusal)
	case refusal != nil:
		return fmt.Errorf("%w: the Redis user may not run the lock scripts under key prefix %q: %w", ErrPermission, c.keyPrefix, refusal)
	case len(denied) > 0:
		return fmt.Errorf("%w: the Redis user may not run %s on keys or channels under key prefix %q, which the locks need",
			ErrPermission, strings.Join(denied, ", "), c.keyPrefix)
	}
	return nil
}
