package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
)

// aclUser creates the ACL user name (password "pw") with rules, and returns a
// rueidis client logged in as it.
func (e *ftEnv) aclUser(name string, rules ...string) rueidis.Client {
	e.t.Helper()
	args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)
	if _, err := e.srv.Do(e.ctx, args...); err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
	return redistest.Client(e.t, e.srv, func(o *rueidis.ClientOption) {
		o.Username, o.Password = name, "pw"
	})
}

// TestProbeNamesDeniedCommands: New fails fast, naming the command, when the
// Redis user lacks one that the scripts run; with full rights it succeeds.
func TestProbeNamesDeniedCommands(t *testing.T) {
	e := ftNewEnv(t)
	keys, chans := "~"+e.prefix+":*", "&"+e.prefix+":*"
	newClient := func(rc rueidis.Client, opts ...rlock.Option) (*rlock.Client, error) {
		c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
		if c != nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}
	for _, tc := range []struct {
		user  string
		rules []string
		want  []string // denied commands New must name; none: New succeeds
	}{
		{"full", []string{keys, chans, "+@all"}, nil},
		{"nopexpire", []string{keys, chans, "+@all", "-pexpire"}, []string{"PEXPIRE"}},
		{"nowrites", []string{keys, chans, "+@all", "-hset", "-del", "-publish"}, []string{"HSET", "DEL", "PUBLISH"}},
		{"nochannels", []string{keys, "resetchannels", "+@all"}, []string{"PUBLISH", "SUBSCRIBE"}},
		{"noevalsha", []string{keys, chans, "+@all", "-evalsha"}, []string{"evalsha"}},
		{"otherkeys", []string{"~other:*", chans, "+@all"}, []string{"NOPERM"}},
	} {
		_, err := newClient(e.aclUser(tc.user, tc.rules...))
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("user %s: New: %v", tc.user, err)
			}
			continue
		}
		if !errors.Is(err, rlock.ErrPermission) {
			t.Errorf("user %s: New: err = %v, want ErrPermission", tc.user, err)
			continue
		}
		for _, cmd := range tc.want {
			if !strings.Contains(err.Error(), cmd) {
				t.Errorf("user %s: New: err = %v, want it to name %s", tc.user, err, cmd)
			}
		}
	}

	// With the probe off, New does not ask.
	if _, err := newClient(e.aclUser("unprobed", keys, chans, "+@all", "-pexpire"), rlock.WithProbe(false)); err != nil {
		t.Errorf("New WithProbe(false) for a user without PEXPIRE: %v", err)
	}
}

// TestProbeRedisUnreachable: with the server stopped (or not answering), New
// succeeds within the probe timeout; the locks report the connection errors.
func TestProbeRedisUnreachable(t *testing.T) {
	e := ftNewEnv(t)
	rc := redistest.Client(t, e.srv)
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := rlock.New(rc, rlock.WithKeyPrefix(e.prefix))
	if err != nil {
		t.Fatalf("New with Redis stopped: %v", err)
	}
	defer func() { _ = c.Close() }()
	if d := time.Since(start); d > rlock.DefaultProbeTimeout+time.Second {
		t.Errorf("New with Redis stopped took %v", d)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Mutex("x").IsLocked(ctx); err == nil {
		t.Error("IsLocked with Redis stopped succeeded")
	}
}

// TestProbeTimeout: a server that does not answer (paused) delays New by at
// most the probe timeout, and does not fail it.
func TestProbeTimeout(t *testing.T) {
	e := ftNewEnv(t)
	rc := redistest.Client(t, e.srv)
	if err := rc.Do(e.ctx, rc.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.srv.Resume() }()
	const timeout = 200 * time.Millisecond
	start := time.Now()
	c, err := rlock.New(rc, rlock.WithKeyPrefix(e.prefix), rlock.WithProbeTimeout(timeout))
	if err != nil {
		t.Fatalf("New with Redis paused: %v", err)
	}
	if d := time.Since(start); d > timeout+time.Second {
		t.Errorf("New with Redis paused took %v, probe timeout %v", d, timeout)
	}
	if err := e.srv.Resume(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// singleNodeCluster starts a one-node Redis Cluster owning every slot: the
// cheapest server on which a cluster client (and sharded pub/sub) works.
func singleNodeCluster(t *testing.T, ctx context.Context) *redistest.Server {
	t.Helper()
	srv := redistest.Owned(t, redistest.WithArgs("--cluster-enabled", "yes"))
	if _, err := srv.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the cluster never became ready", func() bool {
		msg, err := srv.Do(ctx, "CLUSTER", "INFO")
		info, _ := msg.ToString()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return srv
}

// TestProbeShardedAndWait: the probe checks the pub/sub commands the
// Client's multiplexer uses (SPUBLISH, SSUBSCRIBE on a Redis 7 cluster, where
// it shards by default; PUBLISH, SUBSCRIBE otherwise), and WAIT with
// WithReplicaAck.
func TestProbeShardedAndWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := singleNodeCluster(t, ctx)
	const keys, chans = "~rlock:*", "&rlock:*"
	user := func(name string, rules ...string) rueidis.Client {
		t.Helper()
		args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)
		if _, err := srv.Do(ctx, args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return redistest.Client(t, srv, func(o *rueidis.ClientOption) {
			o.Username, o.Password, o.ForceSingleClient = name, "pw", false
		})
	}
	for _, tc := range []struct {
		user    string
		rules   []string
		sharded bool // false: pubsub.ShardingClassic forced on the cluster client
		opts    []rlock.Option
		want    []string // denied commands New must name; none: New succeeds
	}{
		{"full", []string{keys, chans, "+@all"}, true, nil, nil},
		{"nospublish", []string{keys, chans, "+@all", "-spublish"}, true, nil, []string{"SPUBLISH"}},
		{"nossubscribe", []string{keys, chans, "+@all", "-ssubscribe"}, true, nil, []string{"SSUBSCRIBE"}},
		{"nochannels", []string{keys, "resetchannels", "+@all"}, true, nil, []string{"SPUBLISH", "SSUBSCRIBE"}},
		// Sharded mode needs no classic pub/sub, and classic mode no sharded.
		{"shardedonly", []string{keys, chans, "+@all", "-publish", "-subscribe"}, true, nil, nil},
		{"classiconly", []string{keys, chans, "+@all", "-spublish", "-ssubscribe"}, false, nil, nil},
		{"classicnopublish", []string{keys, chans, "+@all", "-publish"}, false, nil, []string{"PUBLISH"}},
		// WAIT only with WithReplicaAck.
		{"nowait", []string{keys, chans, "+@all", "-wait"}, true, []rlock.Option{rlock.WithReplicaAck(1, time.Second)}, []string{"WAIT"}},
		{"nowaitunasked", []string{keys, chans, "+@all", "-wait"}, true, nil, nil},
	} {
		opts := tc.opts
		if !tc.sharded {
			opts = append(opts, rlock.WithPubSub(pubsub.WithSharding(pubsub.ShardingClassic)))
		}
		c, err := rlock.New(user(tc.user, tc.rules...), opts...)
		if c != nil {
			_ = c.Close()
		}
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("user %s: New: %v", tc.user, err)
			}
			continue
		}
		if !errors.Is(err, rlock.ErrPermission) {
			t.Errorf("user %s: New: err = %v, want ErrPermission", tc.user, err)
			continue
		}
		for _, cmd := range tc.want {
			if !strings.Contains(err.Error(), cmd) {
				t.Errorf("user %s: New: err = %v, want it to name %s", tc.user, err, cmd)
			}
		}
		if tc.user == "nospublish" && strings.Contains(err.Error(), " PUBLISH") {
			t.Errorf("user %s: New: err = %v names PUBLISH, which sharded mode does not use", tc.user, err)
		}
	}
}
