package redistest

// The Docker fallback, used by the test wrappers only when no redis-server
// binary is on PATH. Nothing here runs (Docker is not even probed) when the
// binary exists.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// dockerProbeTimeout bounds the check that a Docker engine answers.
const dockerProbeTimeout = 5 * time.Second

// dockerAvailable reports whether a Docker engine answers, as an error
// saying why not.
func dockerAvailable(ctx context.Context) (err error) {
	// testcontainers may panic when no engine is configured; treat that as
	// "no Docker" rather than crashing the test binary.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker probe panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

// dockerRedis runs Redis in a container whose port 6379 is published on a
// fixed 127.0.0.1 port, so Restart keeps the address.
type dockerRedis struct {
	addr    string
	timeout time.Duration
	ctr     testcontainers.Container
}

// startContainer starts cfg.image and waits for PING. The caller must call
// Close on the returned server.
func startContainer(ctx context.Context, cfg config) (*Server, error) {
	port, err := reservePort()
	if err != nil {
		return nil, fmt.Errorf("redistest: pick a port: %w", err)
	}
	d, err := runContainer(ctx, cfg, port)
	if err != nil {
		releasePort(port)
		return nil, fmt.Errorf("redistest: start container %s: %w", cfg.image, err)
	}
	return newServer(d.addr, d, func() { releasePort(port) }), nil
}

func runContainer(ctx context.Context, cfg config, port int) (*dockerRedis, error) {
	redisPort, err := network.ParsePort("6379/tcp")
	if err != nil {
		return nil, err
	}
	hostPort := strconv.Itoa(port)
	loopback := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	cmd := append([]string{
		"redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no",
	}, cfg.args...)
	ctr, err := testcontainers.Run(ctx, cfg.image,
		testcontainers.WithCmd(cmd...),
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				redisPort: {{HostIP: loopback, HostPort: hostPort}},
			}
		}),
	)
	if err != nil {
		return nil, errors.Join(err, testcontainers.TerminateContainer(ctr))
	}
	d := &dockerRedis{addr: "127.0.0.1:" + hostPort, timeout: cfg.startTimeout, ctr: ctr}
	if err := d.waitReady(ctx); err != nil {
		return nil, errors.Join(err, testcontainers.TerminateContainer(ctr))
	}
	return d, nil
}

func (d *dockerRedis) waitReady(ctx context.Context) error {
	if err := waitReady(ctx, d.addr, nil, d.timeout); err != nil {
		return fmt.Errorf("%w\n--- container log tail ---\n%s", err, d.logTail(ctx))
	}
	return nil
}

func (d *dockerRedis) start(ctx context.Context) error {
	if err := d.ctr.Start(ctx); err != nil {
		return err
	}
	return d.waitReady(ctx)
}

// kill stops the container at once (SIGKILL, no grace period). Docker
// keeps the port binding for the next start.
func (d *dockerRedis) kill(ctx context.Context) error {
	zero := time.Duration(0)
	return d.ctr.Stop(ctx, &zero)
}

func (d *dockerRedis) pause(ctx context.Context) error {
	return d.withClient(ctx, func(cli *testcontainers.DockerClient) error {
		_, err := cli.ContainerPause(ctx, d.ctr.GetContainerID(), client.ContainerPauseOptions{})
		return err
	})
}

func (d *dockerRedis) resume(ctx context.Context) error {
	return d.withClient(ctx, func(cli *testcontainers.DockerClient) error {
		_, err := cli.ContainerUnpause(ctx, d.ctr.GetContainerID(), client.ContainerUnpauseOptions{})
		return err
	})
}

// destroy removes the container. A paused container is unpaused first, as
// some engines refuse to stop a paused container.
func (d *dockerRedis) destroy(ctx context.Context) error {
	_ = d.resume(ctx) // fails harmlessly when not paused
	return testcontainers.TerminateContainer(d.ctr)
}

func (d *dockerRedis) withClient(ctx context.Context, f func(*testcontainers.DockerClient) error) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(cli)
}

func (d *dockerRedis) logTail(ctx context.Context) string {
	rc, err := d.ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(logs unavailable: %v)", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil && len(b) == 0 {
		return fmt.Sprintf("(logs unavailable: %v)", err)
	}
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	return string(b)
}
