package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// StartServer starts a private redis-server on a free 127.0.0.1 port with
// persistence off and a fresh temporary directory, and returns once it
// answers PING. The binary comes from PATH (see [WithBinary]); Docker is
// never used. The caller must call [Server.Close].
func StartServer(ctx context.Context, opts ...Option) (*Server, error) {
	return startProcess(ctx, newConfig(opts))
}

func startProcess(ctx context.Context, cfg config) (*Server, error) {
	if err := checkArgs(cfg.args); err != nil {
		return nil, err
	}
	bin, err := exec.LookPath(cfg.binary)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w (install it with `apt-get install -y redis-server`)", err)
	}
	dir, err := makeTempDir()
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	conf := ""
	if cfg.sentinelConf != "" {
		conf = filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(cfg.sentinelConf), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		port, err := reservePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: pick a port: %w", err)
		}
		p := &process{bin: bin, dir: dir, port: port, args: cfg.args, timeout: cfg.startTimeout, conf: conf}
		err = p.start(ctx)
		if err == nil {
			return newServer(p.addr(), p, func() { releasePort(port) }), nil
		}
		releasePort(port)
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: start redis-server: %w", err)
		}
	}
}

// StartServers starts n independent redis-server processes in parallel
// (see [StartServer]). If any fails, the others are closed and the errors
// returned.
func StartServers(ctx context.Context, n int, opts ...Option) ([]*Server, error) {
	cfg := newConfig(opts)
	return startN(ctx, n, func(ctx context.Context) (*Server, error) {
		return startProcess(ctx, cfg)
	})
}

func startN(ctx context.Context, n int, start func(context.Context) (*Server, error)) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("redistest: need at least one server, got %d", n)
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range servers {
			if s != nil {
				err = errors.Join(err, s.Close())
			}
		}
		return nil, err
	}
	return servers, nil
}

// managedArgs are set by this package; overriding them would break Addr,
// Restart or cleanup (or reach a system Redis on 6379).
var managedArgs = []string{"--port", "--bind", "--dir", "--logfile", "--daemonize"}

func checkArgs(args []string) error {
	for _, a := range args {
		for _, m := range managedArgs {
			if strings.EqualFold(a, m) {
				return fmt.Errorf("redistest: WithArgs may not set %s; it is managed by redistest", m)
			}
		}
	}
	return nil
}
