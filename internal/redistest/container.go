package redistest

// The Docker fallback, used by the test wrappers only when no redis-server
// binary is on PATH. Nothing here runs (Docker is not even probed) when the
// binary exists.
//
// The containers are run by the dockerredis program (directory dockerredis),
// a module of its own that this package starts with `go run`: testcontainers
// and the Docker client pull some fifty modules (moby, OpenTelemetry, ...)
// that a user of the library must not have to download, and only a separate
// module keeps them out of the library's go.mod. The price: the fallback
// needs the go command and this package's source directory (it is there
// whenever the tests of a clone run), and its first use compiles the helper.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// dockerProbeTimeout bounds the check that a Docker engine answers,
	// compiling the helper on first use included.
	dockerProbeTimeout = 3 * time.Minute
	// helperExitTimeout bounds the wait for a helper whose container failed
	// to start to exit (Close is bounded by the context it is given).
	helperExitTimeout = time.Minute
)

// helperDir returns the directory of the dockerredis module, found next to
// this source file.
func helperDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the source of package redistest")
	}
	dir := filepath.Join(filepath.Dir(file), "dockerredis")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("the Docker helper module is not at %s (built with -trimpath, or from a module zip, which leaves nested modules out): %w", dir, err)
	}
	return dir, nil
}

// helperCommand returns `go run . args...` in the helper's directory. The
// go command is the one running the tests (go test puts its GOROOT/bin first
// on PATH), and no go.work may mix the helper's module with others.
func helperCommand(ctx context.Context, args ...string) (*exec.Cmd, error) {
	dir, err := helperDir()
	if err != nil {
		return nil, err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the Docker fallback runs its helper with the go command: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, append([]string{"run", "."}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	return cmd, nil
}

// dockerAvailable reports whether a Docker engine answers, as an error
// saying why not.
func dockerAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	cmd, err := helperCommand(ctx, "probe")
	if err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return errors.New(lastLines(msg, 5)) // ends with go run's "exit status"
		}
		return err
	}
	return nil
}

// dockerRedis is one container, run by a dockerredis helper process. Its
// port 6379 is published on a fixed 127.0.0.1 port, so Restart keeps the
// address.
type dockerRedis struct {
	addr    string
	timeout time.Duration

	mu      sync.Mutex // one command at a time
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan string   // lines from the helper's stdout; closed when it ends
	stderr  *lockedBuffer // the go command's and the helper's messages
	done    chan struct{} // closed once the helper process was reaped
	broken  error         // a command went unanswered: replies may be out of step
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
	args := append([]string{"run", "-image", cfg.image, "-port", strconv.Itoa(port), "--"}, cfg.args...)
	// The helper must outlive ctx (it runs the container until Close), so
	// it is not started with exec.CommandContext's ctx.
	cmd, err := helperCommand(context.Background(), args...)
	if err != nil {
		return nil, err
	}
	d := &dockerRedis{
		addr:    "127.0.0.1:" + strconv.Itoa(port),
		timeout: cfg.startTimeout,
		cmd:     cmd,
		replies: make(chan string),
		stderr:  new(lockedBuffer),
		done:    make(chan struct{}),
	}
	cmd.Stderr = d.stderr
	// Its own process group, so that a helper that hangs can be killed
	// with the program `go run` started; if this process dies, the helper
	// sees its stdin close and removes the container.
	cmd.SysProcAttr = sysProcAttr()
	if d.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20) // logs come as one line
		for sc.Scan() {
			d.replies <- sc.Text()
		}
		close(d.replies)
		_ = cmd.Wait() // after reading: Wait closes stdout
		close(d.done)
	}()
	// The first line reports the container's start.
	sctx, cancel := context.WithTimeout(context.Background(), helperExitTimeout)
	defer cancel()
	if err := d.awaitStart(ctx); err != nil {
		_ = d.stop(sctx) // it exits with a failure status, having said why
		return nil, err
	}
	if err := d.waitReady(ctx); err != nil {
		return nil, errors.Join(err, d.stop(sctx))
	}
	return d, nil
}

// do sends one command and returns the helper's answer.
func (d *dockerRedis) do(ctx context.Context, command string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.broken != nil {
		return "", d.broken
	}
	if _, err := io.WriteString(d.stdin, command+"\n"); err != nil {
		return "", fmt.Errorf("docker helper: %w%s", err, d.stderrTail())
	}
	return d.awaitLocked(ctx)
}

// awaitStart reads the helper's first answer, which reports the container's
// start.
func (d *dockerRedis) awaitStart(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.awaitLocked(ctx)
	return err
}

// awaitLocked reads the next answer; d.mu is held.
func (d *dockerRedis) awaitLocked(ctx context.Context) (string, error) {
	select {
	case line, ok := <-d.replies:
		if !ok {
			return "", fmt.Errorf("docker helper exited%s", d.stderrTail())
		}
		if rest, isErr := strings.CutPrefix(line, "err "); isErr {
			return "", errors.New(rest)
		}
		if line == "ok" {
			return "", nil
		}
		if rest, isOK := strings.CutPrefix(line, "ok "); isOK {
			return rest, nil
		}
		d.broken = fmt.Errorf("docker helper: unexpected answer %q", line)
		return "", d.broken
	case <-ctx.Done():
		// The answer may still come, and would be taken for the next one's.
		d.broken = fmt.Errorf("docker helper: no answer: %w", ctx.Err())
		return "", d.broken
	}
}

func (d *dockerRedis) waitReady(ctx context.Context) error {
	if err := waitReady(ctx, d.addr, nil, d.timeout); err != nil {
		return fmt.Errorf("%w\n--- container log tail ---\n%s", err, d.logTail(ctx))
	}
	return nil
}

func (d *dockerRedis) start(ctx context.Context) error {
	if _, err := d.do(ctx, "start"); err != nil {
		return err
	}
	return d.waitReady(ctx)
}

// kill stops the container at once (SIGKILL, no grace period). Docker
// keeps the port binding for the next start.
func (d *dockerRedis) kill(ctx context.Context) error {
	_, err := d.do(ctx, "kill")
	return err
}

func (d *dockerRedis) pause(ctx context.Context) error {
	_, err := d.do(ctx, "pause")
	return err
}

func (d *dockerRedis) resume(ctx context.Context) error {
	_, err := d.do(ctx, "resume")
	return err
}

// destroy has the helper remove the container (unpausing it first) and
// exit.
func (d *dockerRedis) destroy(ctx context.Context) error {
	return d.stop(ctx)
}

// stop closes the helper's stdin, which makes it remove the container and
// exit, and waits for that until ctx is done; a helper that does not exit in
// time is killed (its container is then left to testcontainers' reaper).
func (d *dockerRedis) stop(ctx context.Context) error {
	_ = d.stdin.Close()
	go func() { // drain answers nobody waits for, so the reader can end
		for range d.replies {
		}
	}()
	select {
	case <-d.done:
	case <-ctx.Done():
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
		return fmt.Errorf("docker helper did not remove its container in time (%w); killed it%s", ctx.Err(), d.stderrTail())
	}
	if st := d.cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("docker helper: %v%s", st, d.stderrTail())
	}
	return nil
}

func (d *dockerRedis) logTail(ctx context.Context) string {
	quoted, err := d.do(ctx, "logs")
	if err != nil {
		return fmt.Sprintf("(logs unavailable: %v)", err)
	}
	logs, err := strconv.Unquote(quoted)
	if err != nil {
		return fmt.Sprintf("(logs unavailable: %v)", err)
	}
	if len(logs) > tailBytes {
		logs = logs[len(logs)-tailBytes:]
	}
	return logs
}

func (d *dockerRedis) stderrTail() string {
	s := strings.TrimSpace(d.stderr.String())
	if s == "" {
		return ""
	}
	return "\n--- docker helper output ---\n" + lastLines(s, 20)
}

// lockedBuffer is a buffer that the process's output copier writes to
// while error paths read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lastLines returns at most n lines from the end of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
