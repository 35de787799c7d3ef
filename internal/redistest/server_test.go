package redistest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { VerifyNoLeaks(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10ms until it holds or 5s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func pidOf(t *testing.T, s *Server) int {
	t.Helper()
	p, ok := s.b.(*process)
	require.True(t, ok, "not a process-backed server")
	return p.run.cmd.Process.Pid
}

func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	_, statErr := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, syscall.ESRCH) && os.IsNotExist(statErr)
}

func TestStartServerPing(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, err := StartServer(ctx)
	require.NoError(t, err)
	defer s.Close()

	assert.True(t, s.Owned())
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())
	assert.NotEqual(t, "127.0.0.1:6379", s.Addr())
	require.NoError(t, s.Ping(ctx))

	_, err = s.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	msg, err := s.Do(ctx, "GET", "k")
	require.NoError(t, err)
	v, err := msg.ToString()
	require.NoError(t, err)
	assert.Equal(t, "v", v)

	msg, err = s.Do(ctx, "CONFIG", "GET", "save")
	require.NoError(t, err)
	cfg, err := msg.AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "", cfg["save"], "snapshots must be off")
}

func TestKillRestartSamePortEmpty(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	addr := s.Addr()
	pid := pidOf(t, s)

	_, err := s.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)

	require.NoError(t, s.Kill())
	assert.True(t, processGone(pid), "killed process must be reaped")
	assert.Error(t, s.Ping(ctx))
	require.NoError(t, s.Kill(), "Kill is idempotent")
	assert.ErrorIs(t, s.Pause(), ErrNotRunning)

	require.NoError(t, s.Restart(ctx))
	assert.Equal(t, addr, s.Addr())
	require.NoError(t, s.Ping(ctx))
	msg, err := s.Do(ctx, "DBSIZE")
	require.NoError(t, err)
	n, err := msg.AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "data must be gone after Kill+Restart")

	// Restart of a running server kills it first.
	pid = pidOf(t, s)
	require.NoError(t, s.Restart(ctx))
	assert.True(t, processGone(pid))
	require.NoError(t, s.Ping(ctx))
}

func TestClientSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	c := Client(t, s)
	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error())
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(ctx))
	eventually(t, "client reconnects", func() bool {
		err := c.Do(ctx, c.B().Get().Key("k").Build()).Error()
		return rueidis.IsRedisNil(err)
	})
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)

	require.NoError(t, s.Pause())
	require.NoError(t, s.Pause(), "Pause is idempotent")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := s.Ping(short)
	cancel()
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.Do(short, "PING")
	cancel()
	assert.Error(t, err, "Do must honour the context deadline on a paused server")

	require.NoError(t, s.Resume())
	require.NoError(t, s.Resume(), "Resume is idempotent")
	require.NoError(t, s.Ping(ctx))
}

func TestKillPausedServer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	pid := pidOf(t, s)
	require.NoError(t, s.Pause())
	require.NoError(t, s.Kill())
	assert.True(t, processGone(pid))
	require.NoError(t, s.Restart(ctx))
	require.NoError(t, s.Ping(ctx))
}

func TestStartServersDistinctPorts(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	servers, err := StartServers(ctx, 3)
	require.NoError(t, err)
	defer func() {
		for _, s := range servers {
			assert.NoError(t, s.Close())
		}
	}()
	require.Len(t, servers, 3)
	seen := map[string]bool{}
	for _, s := range servers {
		require.NoError(t, s.Ping(ctx))
		seen[s.Addr()] = true
	}
	assert.Len(t, seen, 3)

	_, err = StartServers(ctx, 0)
	assert.Error(t, err)
}

func TestNewN(t *testing.T) {
	t.Parallel()
	servers := NewN(t, 2)
	require.Len(t, servers, 2)
	assert.NotEqual(t, servers[0].Addr(), servers[1].Addr())
}

func TestCloseLeavesNoProcess(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	for _, paused := range []bool{false, true} {
		s, err := StartServer(ctx)
		require.NoError(t, err)
		pid := pidOf(t, s)
		dir := s.b.(*process).dir
		if paused {
			require.NoError(t, s.Pause())
		}
		require.NoError(t, s.Close())
		assert.True(t, processGone(pid), "paused=%v: process left behind", paused)
		_, err = os.Stat(dir)
		assert.True(t, os.IsNotExist(err), "temp dir left behind")
		assert.Error(t, s.Ping(ctx))

		require.NoError(t, s.Close(), "Close is idempotent")
		assert.ErrorIs(t, s.Kill(), ErrClosed)
		assert.ErrorIs(t, s.Restart(ctx), ErrClosed)
		assert.ErrorIs(t, s.Pause(), ErrClosed)
	}
}

func TestCommandStats(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	for range 3 {
		_, err := s.Do(ctx, "SET", "k", "v")
		require.NoError(t, err)
	}
	_, err := s.Do(ctx, "EVAL", "return 1", "0")
	require.NoError(t, err)
	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), stats["set"])
	assert.Equal(t, int64(1), stats["eval"])
	assert.NotContains(t, stats, "get")
}

func TestParseCommandStats(t *testing.T) {
	stats, err := parseCommandStats("# Commandstats\r\n" +
		"cmdstat_EVALSHA:calls=7,usec=1,usec_per_call=0.14,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|kill:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"evalsha": 7, "client|kill": 2}, stats)
}

func TestNumSubAndKillClients(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	for _, resp2 := range []bool{false, true} {
		c := Client(t, s, func(o *rueidis.ClientOption) {
			o.AlwaysRESP2 = resp2
			o.DisableCache = resp2
		})
		subCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- c.Receive(subCtx, c.B().Subscribe().Channel("ch").Build(), func(rueidis.PubSubMessage) {})
		}()
		eventually(t, "subscriber", func() bool {
			n, err := s.NumSub(ctx, "ch", "other")
			return err == nil && n["ch"] == 1 && n["other"] == 0
		})
		killed, err := s.KillClients(ctx, "pubsub")
		require.NoError(t, err)
		assert.Equal(t, int64(1), killed, "resp2=%v: a subscribed connection is a pubsub client", resp2)
		cancel()
		<-done
		c.Close()
	}
}

func TestAttachIsNotOwned(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	owner := Owned(t)
	s, err := Attach(ctx, owner.Addr())
	require.NoError(t, err)
	assert.False(t, s.Owned())
	assert.ErrorIs(t, s.Kill(), ErrNotOwned)
	assert.ErrorIs(t, s.Pause(), ErrNotOwned)
	assert.ErrorIs(t, s.Resume(), ErrNotOwned)
	assert.ErrorIs(t, s.Restart(ctx), ErrNotOwned)
	require.NoError(t, s.Close())
	require.NoError(t, owner.Ping(ctx), "closing an attached server leaves it running")
}

func TestNewPrefersREDIS_ADDR(t *testing.T) {
	// t.Setenv forbids t.Parallel.
	owner, err := StartServer(ctxT(t))
	require.NoError(t, err)
	defer owner.Close()

	t.Setenv(EnvAddr, owner.Addr())
	shared := New(t)
	assert.False(t, shared.Owned())
	assert.Equal(t, owner.Addr(), shared.Addr())
	assert.True(t, Owned(t).Owned(), "Owned never uses REDIS_ADDR")

	t.Setenv(EnvAddr, "")
	s := New(t)
	assert.True(t, s.Owned())
	assert.NotEqual(t, owner.Addr(), s.Addr())
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t, WithArgs("--maxmemory", "10mb"))
	msg, err := s.Do(ctx, "CONFIG", "GET", "maxmemory")
	require.NoError(t, err)
	cfg, err := msg.AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "10485760", cfg["maxmemory"])
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	_, err := StartServer(ctxT(t), WithArgs("--no-such-directive", "x"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Bad directive")
}

func TestKeyPrefix(t *testing.T) {
	t.Run("sub test/with spaces", func(t *testing.T) {
		a, b := KeyPrefix(t), KeyPrefix(t)
		assert.NotEqual(t, a, b)
		assert.True(t, strings.HasPrefix(a, "TestKeyPrefix_sub_test_with_spaces-"), a)
		assert.True(t, strings.HasSuffix(a, ":"), a)
	})
}

func TestSweepStaleDirs(t *testing.T) {
	// A process that has exited gives a pid that is (almost surely) free.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	stale := filepath.Join(os.TempDir(), tempPrefix+strconv.Itoa(cmd.Process.Pid)+"-test")
	require.NoError(t, os.MkdirAll(stale, 0o700))
	mine, err := os.MkdirTemp("", tempPrefix+strconv.Itoa(os.Getpid())+"-")
	require.NoError(t, err)
	defer os.RemoveAll(mine)

	sweepStaleDirs()
	_, err = os.Stat(stale)
	assert.True(t, os.IsNotExist(err), "stale dir of a dead process must be removed")
	_, err = os.Stat(mine)
	assert.NoError(t, err, "own dir must be kept")
}

func TestRestartDetectsPortThief(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := Owned(t)
	require.NoError(t, s.Kill())

	// Another server takes the port while ours is down.
	_, port, _ := strings.Cut(s.Addr(), ":")
	thief := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, thief.Start())
	stopThief := func() {
		_ = thief.Process.Kill()
		_ = thief.Wait()
	}
	defer stopThief()
	eventually(t, "thief ready", func() bool { return s.Ping(ctx) == nil })

	short, cancel := context.WithTimeout(ctx, time.Second)
	err := s.Restart(short)
	cancel()
	require.Error(t, err)
	assert.ErrorIs(t, err, errAddrInUse)

	stopThief()
	require.NoError(t, s.Restart(ctx))
	pid, err := serverPID(ctx, s.Addr())
	require.NoError(t, err)
	assert.Equal(t, pidOf(t, s), pid)
}

func TestManagedArgsRefused(t *testing.T) {
	t.Parallel()
	_, err := StartServer(ctxT(t), WithArgs("--port", "6379"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--port")
}

func TestNoRedisAvailableMessage(t *testing.T) {
	t.Parallel()
	if dockerAvailable(ctxT(t)) == nil {
		t.Skip("a Docker engine answers here, so the fallback would be used")
	}
	_, err := ownedStarter(ctxT(t), newConfig([]Option{WithBinary("redistest-no-such-binary")}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apt-get install -y redis-server")
	assert.Contains(t, err.Error(), "REDIS_ADDR=host:port")
}

// TestServeExamples: without a REDIS_ADDR of the user's, ServeExamples points
// REDIS_ADDR (and the quorum variable) at servers of its own, which New does
// not hand to tests; stop closes them and clears the variables. A REDIS_ADDR
// the user set is left alone, and New keeps using it.
func TestServeExamples(t *testing.T) {
	// t.Setenv forbids t.Parallel.
	t.Setenv(EnvAddr, "")
	t.Setenv(EnvQuorumAddrs, "")
	t.Setenv(envExamples, "")
	stop, err := ServeExamples(2)
	require.NoError(t, err)
	addr, quorum := os.Getenv(EnvAddr), strings.Split(os.Getenv(EnvQuorumAddrs), ",")
	require.NotEmpty(t, addr)
	require.Len(t, quorum, 2)
	for _, a := range append(quorum, addr) {
		assert.NotEqual(t, "127.0.0.1:6379", a)
		s, err := Attach(ctxT(t), a)
		require.NoError(t, err, "server %s", a)
		require.NoError(t, s.Close())
	}
	s := New(t)
	assert.True(t, s.Owned(), "New handed out the examples' server")
	assert.NotEqual(t, addr, s.Addr())

	stop()
	assert.Empty(t, os.Getenv(EnvAddr))
	assert.Empty(t, os.Getenv(EnvQuorumAddrs))
	_, err = Attach(ctxT(t), addr)
	assert.Error(t, err, "the examples' server outlived stop")

	// The user's REDIS_ADDR stays, and tests keep sharing it.
	user := Owned(t)
	t.Setenv(EnvAddr, user.Addr())
	stop, err = ServeExamples(0)
	require.NoError(t, err)
	assert.Equal(t, user.Addr(), os.Getenv(EnvAddr))
	assert.Equal(t, user.Addr(), New(t).Addr())
	stop()
	assert.Equal(t, user.Addr(), os.Getenv(EnvAddr))
}
