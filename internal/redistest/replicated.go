package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/rueidis"
)

// Replicated is a master with replicas of its own (--replicaof), without
// Sentinels: for tests of replica acknowledgement (WAIT), where a replica is
// paused or killed to keep it from acknowledging.
type Replicated struct {
	Master   *Server
	Replicas []*Server
}

// StartReplicated starts a master and replicas replicas of it, and returns
// once the master reports them all online (the initial sync done). opts
// apply to every server. The binary comes from PATH, as for StartServer;
// the caller must call [Replicated.Close].
func StartReplicated(ctx context.Context, replicas int, opts ...Option) (r *Replicated, err error) {
	if replicas < 1 {
		return nil, fmt.Errorf("redistest: a replicated master needs at least 1 replica, got %d", replicas)
	}
	r = &Replicated{}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
			r = nil
		}
	}()
	// Full syncs at once (the default waits 5s for more replicas to come).
	cfg := newConfig(append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...))
	if r.Master, err = startProcess(ctx, cfg); err != nil {
		return nil, err
	}
	host, port := splitAddr(r.Master.Addr())
	rcfg := cfg
	rcfg.args = append(append([]string(nil), cfg.args...), "--replicaof", host, port)
	servers, err := startN(ctx, replicas, func(ctx context.Context) (*Server, error) { return startProcess(ctx, rcfg) })
	if err != nil {
		return nil, err
	}
	r.Replicas = servers
	if err := WaitReplicas(ctx, r.Master, replicas); err != nil {
		return nil, err
	}
	if err := waitAcks(ctx, r.Master, replicas); err != nil {
		return nil, err
	}
	return r, nil
}

// waitAcks waits until n replicas acknowledge a write to master (a key
// written and deleted again): a replica reported online may take most of a
// second more (its first acknowledgement after the initial sync) before WAIT
// counts it.
func waitAcks(ctx context.Context, master *Server, n int) error {
	rc, err := master.Client(func(o *rueidis.ClientOption) { o.DisableCache = true })
	if err != nil {
		return err
	}
	defer rc.Close()
	const key = "redistest:replicated"
	return rc.Dedicated(func(dc rueidis.DedicatedClient) error {
		for _, cmd := range []rueidis.Completed{dc.B().Set().Key(key).Value("1").Build(), dc.B().Del().Key(key).Build()} {
			if err := dc.Do(ctx, cmd).Error(); err != nil {
				return fmt.Errorf("redistest: write to %s: %w", master.Addr(), err)
			}
		}
		return pollFor(ctx, fmt.Sprintf("%d replica(s) of %s to acknowledge a write", n, master.Addr()), func(ctx context.Context) (bool, error) {
			acked, err := dc.Do(ctx, dc.B().Wait().Numreplicas(int64(n)).Timeout(100).Build()).AsInt64()
			return err == nil && acked >= int64(n), err
		})
	})
}

// NewReplicated is StartReplicated for a test: it fails the test when the
// servers cannot be started, and closes them at cleanup.
func NewReplicated(tb testing.TB, replicas int, opts ...Option) *Replicated {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	r, err := StartReplicated(ctx, replicas, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return r
}

// Close closes the replicas, then the master; it is idempotent.
func (r *Replicated) Close() error {
	var errs []error
	for _, s := range append(append([]*Server(nil), r.Replicas...), r.Master) {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}
