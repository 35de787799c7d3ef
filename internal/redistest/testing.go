package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// EnvAddr names the environment variable that points [New] at a shared,
// externally run server (host:port).
const EnvAddr = "REDIS_ADDR"

// testStartTimeout bounds starting servers from the test wrappers; it is
// generous because the container fallback may pull an image.
const testStartTimeout = 3 * time.Minute

const howToGetRedis = "no Redis available for tests: install redis-server " +
	"(`apt-get install -y redis-server`), or set REDIS_ADDR=host:port to use a running server, " +
	"or run a Docker engine (testcontainers image " + DefaultImage + ")"

// New returns a Redis for an ordinary test and closes it at cleanup. It uses,
// in order: the server at $REDIS_ADDR (shared, not owned: use [KeyPrefix])
// when the user set it (not [ServeExamples]); a private redis-server from
// PATH; a private container when a Docker engine answers. With none of them the test fails (it is never skipped).
// Options do not apply to a $REDIS_ADDR server.
func New(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	if addr := userAddr(); addr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := Attach(ctx, addr)
		if err != nil {
			tb.Fatalf("%s=%s: %v", EnvAddr, addr, err)
		}
		return s
	}
	return Owned(tb, opts...)
}

// Owned returns a server this process owns, for fault injection (Kill,
// Restart, Pause): a redis-server process, else a container. It never uses
// $REDIS_ADDR. The server is closed at cleanup.
func Owned(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return NewN(tb, 1, opts...)[0]
}

// NewN returns n independent servers this process owns, started in
// parallel, each closed at cleanup. See [Owned].
func NewN(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	start, err := ownedStarter(ctx, newConfig(opts))
	if err != nil {
		tb.Fatal(err)
	}
	servers, err := startN(ctx, n, start)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range servers {
		tb.Cleanup(func() {
			if err := s.Close(); err != nil {
				tb.Errorf("redistest: %v", err)
			}
		})
	}
	return servers
}

// ownedStarter picks the binary when it is on PATH, else Docker when an
// engine answers. Docker is not probed when the binary exists.
func ownedStarter(ctx context.Context, cfg config) (func(context.Context) (*Server, error), error) {
	if _, err := exec.LookPath(cfg.binary); err == nil {
		return func(ctx context.Context) (*Server, error) {
			return startProcess(ctx, cfg)
		}, nil
	}
	if err := dockerAvailable(ctx); err != nil {
		return nil, fmt.Errorf("redistest: %s (%s not found on PATH; Docker: %v)", howToGetRedis, cfg.binary, err)
	}
	return func(ctx context.Context) (*Server, error) {
		return startContainer(ctx, cfg)
	}, nil
}

// Client returns a new rueidis client for s that is closed at cleanup. See
// [Server.Client] for the defaults.
func Client(tb testing.TB, s *Server, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	c, err := s.Client(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// KeyPrefix returns a prefix unique to this test run, such as
// "TestLock_renew-3f9a1c07:", for keys and channels of tests that share a
// server. It is the test name with characters other than letters, digits,
// '-', '_' and '.' replaced by '_', plus a random suffix.
func KeyPrefix(tb testing.TB) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return sanitize(tb.Name()) + "-" + hex.EncodeToString(b[:]) + ":"
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, name)
}
