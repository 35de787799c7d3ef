// Command dockerredis runs one Redis server in a Docker container for the
// tests of github.com/relockio/relock, when no redis-server binary is on PATH.
//
// It is a module of its own so that testcontainers-go, the Docker client and
// their dependencies (OpenTelemetry among them) stay out of the module graph
// of the library: package redistest runs it with `go run` from this
// directory and talks to it over stdin and stdout.
//
// Usage:
//
//	dockerredis probe
//	dockerredis run -image redis:7 -port 40123 [redis-server args...]
//
// probe exits with status 0 when a Docker engine answers, else prints why not
// and exits with status 1.
//
// run starts the image with its port 6379 published on 127.0.0.1:port and
// prints one line, "ok" or "err <message>". It then reads commands, one a
// line, and answers each with one line, "ok" (followed by a Go-quoted string
// for logs) or "err <message>":
//
//	start   start the stopped container again (the port binding stays)
//	kill    stop the container at once (no grace period)
//	pause   docker pause
//	resume  docker unpause
//	logs    the container's log
//
// When stdin is closed (the test process ended, whatever the way), it
// removes the container and exits.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

const (
	// probeTimeout bounds the check that a Docker engine answers.
	probeTimeout = 5 * time.Second
	// opTimeout bounds every command; starting may pull the image.
	opTimeout = 3 * time.Minute
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dockerredis probe | run -image IMAGE -port PORT [redis-server args...]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "probe":
		if err := probe(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "run":
		os.Exit(run(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "dockerredis: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// probe reports whether a Docker engine answers, as an error saying why not.
func probe(ctx context.Context) (err error) {
	// testcontainers may panic when no engine is configured; treat that as
	// "no Docker" rather than a crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker probe panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	image := fs.String("image", "redis:7", "container image")
	port := fs.Int("port", 0, "127.0.0.1 port to publish the container's 6379 on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *port <= 0 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "dockerredis: -port must be between 1 and 65535, got %d\n", *port)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(err error, payload string) {
		if err != nil {
			fmt.Fprintln(out, "err", oneLine(err.Error()))
		} else if payload != "" {
			fmt.Fprintln(out, "ok", payload)
		} else {
			fmt.Fprintln(out, "ok")
		}
		_ = out.Flush()
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	ctr, err := startContainer(ctx, *image, *port, fs.Args())
	cancel()
	reply(err, "")
	if err != nil {
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = unpause(ctx, ctr) // some engines refuse to remove a paused container
		if err := testcontainers.TerminateContainer(ctr); err != nil {
			fmt.Fprintln(os.Stderr, "dockerredis: remove container:", err)
		}
	}()

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		switch cmd := strings.TrimSpace(in.Text()); cmd {
		case "start":
			reply(ctr.Start(ctx), "")
		case "kill":
			zero := time.Duration(0)
			reply(ctr.Stop(ctx, &zero), "")
		case "pause":
			reply(withClient(ctx, func(cli *testcontainers.DockerClient) error {
				_, err := cli.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{})
				return err
			}), "")
		case "resume":
			reply(unpause(ctx, ctr), "")
		case "logs":
			logs, err := readLogs(ctx, ctr)
			reply(err, strconv.Quote(logs))
		default:
			reply(fmt.Errorf("unknown command %q", cmd), "")
		}
		cancel()
	}
	return 0
}

// startContainer runs image as redis-server without persistence, its port
// 6379 published on 127.0.0.1:port so that a restart keeps the address.
func startContainer(ctx context.Context, image string, port int, redisArgs []string) (testcontainers.Container, error) {
	redisPort, err := network.ParsePort("6379/tcp")
	if err != nil {
		return nil, err
	}
	hostPort := strconv.Itoa(port)
	loopback := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	cmd := append([]string{
		"redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no",
	}, redisArgs...)
	ctr, err := testcontainers.Run(ctx, image,
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
	return ctr, nil
}

func unpause(ctx context.Context, ctr testcontainers.Container) error {
	return withClient(ctx, func(cli *testcontainers.DockerClient) error {
		_, err := cli.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{})
		return err
	})
}

func withClient(ctx context.Context, f func(*testcontainers.DockerClient) error) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(cli)
}

func readLogs(ctx context.Context, ctr testcontainers.Container) (string, error) {
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil && len(b) == 0 {
		return "", err
	}
	return string(b), nil
}

// oneLine keeps an error message on the single line the protocol allows.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
