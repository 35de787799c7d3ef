package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// defaultPingTimeout bounds a raw command whose context has no deadline.
const defaultPingTimeout = 5 * time.Second

// ping sends a raw RESP PING to addr over a new connection and expects
// PONG. It gives up when ctx is done, returning an error that wraps
// ctx.Err().
func ping(ctx context.Context, addr string) error {
	reply, err := rawCommand(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("ping %s: unexpected reply %q", addr, reply)
	}
	return nil
}

// serverPID asks the server at addr for its process id (INFO server).
func serverPID(ctx context.Context, addr string) (int, error) {
	info, err := rawCommand(ctx, addr, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server from %s has no process_id", addr)
}

// rawCommand sends one command over a new connection and returns a simple
// string, integer or bulk string reply as text; an error reply becomes an
// error. It needs no client library, so it works while the server is still
// starting, and gives up when ctx is done (default: after 5s).
func rawCommand(ctx context.Context, addr string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultPingTimeout)
		defer cancel()
	}
	fail := func(err error) (string, error) {
		return "", wrapCtx(ctx, fmt.Errorf("%s %s: %w", args[0], addr, err))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return fail(err)
	}
	// Unblock at once if ctx is cancelled before its deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return fail(err)
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return fail(err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return fail(errors.New("empty reply"))
	}
	switch body := line[1:]; line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return fail(errors.New(body))
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return fail(fmt.Errorf("unexpected reply %q", line))
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return fail(err)
		}
		return string(buf[:n]), nil
	default:
		return fail(fmt.Errorf("unexpected reply %q", line))
	}
}

// wrapCtx adds ctx.Err() to err when ctx is done, so callers can test for
// context.DeadlineExceeded. A connection deadline taken from ctx can fire
// just before ctx itself reports it, so a timeout past the deadline counts
// too.
func wrapCtx(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		var ne net.Error
		if d, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// waitReady polls addr with PING until it answers, exited is closed (the
// server process died: nil for backends that cannot tell), or timeout/ctx
// runs out.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	const (
		attempt = 500 * time.Millisecond
		every   = 10 * time.Millisecond
	)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(ctx, attempt)
		err := ping(actx, addr)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer PING: %w (last error: %v)", addr, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// errExited reports that the server process ended while we waited for it.
var errExited = errors.New("redis-server exited before answering PING")
