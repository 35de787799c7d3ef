package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// startAttempts is how many ports StartServer tries when the chosen
	// one turns out to be taken.
	startAttempts = 5
	// reapTimeout bounds the wait for a SIGKILLed process to be reaped.
	reapTimeout = 10 * time.Second
	// tailBytes is how much of the logs goes into error messages.
	tailBytes = 2048
)

// errAddrInUse reports that redis-server could not bind its port.
var errAddrInUse = errors.New("port already in use")

// process runs redis-server as a child process on a fixed port.
type process struct {
	bin     string
	dir     string
	port    int
	args    []string
	timeout time.Duration
	conf    string // a Sentinel's configuration file; "" for a plain server

	run     *run // the current or last child; nil before the first start
	started bool // a start has succeeded once: later starts are restarts
}

// run is one redis-server child process.
type run struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd.Wait returned
	waitErr error         // valid after done is closed
	logFrom int64         // size of redis.log before this run
	outFrom int64         // size of stdio.log before this run
}

func (p *process) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *process) logPath() string { return filepath.Join(p.dir, "redis.log") }

func (p *process) outPath() string { return filepath.Join(p.dir, "stdio.log") }

func (p *process) argv() []string {
	var args []string
	if p.conf != "" {
		args = []string{p.conf, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", p.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", p.logPath(),
	)
	return append(args, p.args...)
}

// start runs redis-server on p.port and waits for PING. On a restart, when
// the port is still taken (it can linger briefly after a kill), it retries
// until the start timeout; the first start returns errAddrInUse at once so
// StartServer can pick another port. Other failures are returned at once,
// with the log tail.
func (p *process) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	retry := time.NewTicker(50 * time.Millisecond)
	defer retry.Stop()
	var inUse error // the last "port in use" failure, the likely cause
	for {
		err := p.startOnce(ctx)
		if err == nil {
			p.started = true
			return nil
		}
		if errors.Is(err, errAddrInUse) {
			inUse = err
		} else if inUse != nil && ctx.Err() != nil {
			return inUse // the time ran out during a retry
		}
		if !p.started || !errors.Is(err, errAddrInUse) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-retry.C:
		}
	}
}

func (p *process) startOnce(ctx context.Context) error {
	out, err := os.OpenFile(p.outPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r := &run{
		cmd:     exec.Command(p.bin, p.argv()...),
		done:    make(chan struct{}),
		logFrom: fileSize(p.logPath()),
		outFrom: fileSize(p.outPath()),
	}
	r.cmd.Dir = p.dir
	r.cmd.Stdout = out
	r.cmd.Stderr = out
	r.cmd.SysProcAttr = sysProcAttr()
	err = r.cmd.Start()
	_ = out.Close() // the child has its own copy
	if err != nil {
		return err
	}
	p.run = r
	go func() {
		r.waitErr = r.cmd.Wait()
		close(r.done)
	}()

	err = waitReady(ctx, p.addr(), r.done, p.timeout)
	if err == nil {
		err = p.checkIdentity(ctx, r)
	}
	if err != nil {
		_ = p.killRun(r)
		tail := p.tail(r)
		if strings.Contains(tail, "Address already in use") && !errors.Is(err, errAddrInUse) {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		if errors.Is(err, errExited) && r.waitErr != nil {
			err = fmt.Errorf("%w (%v)", err, r.waitErr)
		}
		return fmt.Errorf("%w\n--- redis-server log tail (%s) ---\n%s", err, p.dir, tail)
	}
	return nil
}

// checkIdentity makes sure the server that answered PING is our child and
// not another server that took the port meanwhile (possible between Kill and
// Restart). If it is not, our child could not bind and is on its way out.
func (p *process) checkIdentity(ctx context.Context, r *run) error {
	pid, err := serverPID(ctx, p.addr())
	if err != nil {
		return err
	}
	if pid != r.cmd.Process.Pid {
		return fmt.Errorf("%w: %s is served by another process (pid %d)", errAddrInUse, p.addr(), pid)
	}
	return nil
}

// killRun SIGKILLs the child's process group (redis-server may have forked
// a snapshot child) and waits until it is reaped. SIGKILL also ends a
// stopped (paused) process.
func (p *process) killRun(r *run) error {
	select {
	case <-r.done:
		return nil
	default:
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		// Fall back to the process itself.
		if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(reapTimeout):
		return fmt.Errorf("redis-server pid %d not reaped after SIGKILL", r.cmd.Process.Pid)
	}
}

func (p *process) kill(context.Context) error {
	if p.run == nil {
		return nil
	}
	return p.killRun(p.run)
}

func (p *process) signal(sig syscall.Signal) error {
	if p.run == nil {
		return ErrNotRunning
	}
	select {
	case <-p.run.done:
		return fmt.Errorf("redis-server exited unexpectedly: %v\n%s", p.run.waitErr, p.tail(p.run))
	default:
	}
	return syscall.Kill(-p.run.cmd.Process.Pid, sig)
}

func (p *process) pause(context.Context) error { return p.signal(syscall.SIGSTOP) }

func (p *process) resume(context.Context) error { return p.signal(syscall.SIGCONT) }

func (p *process) destroy(ctx context.Context) error {
	err := p.kill(ctx)
	return errors.Join(err, os.RemoveAll(p.dir))
}

// tail returns the end of what run r wrote to redis.log and stdout/stderr.
func (p *process) tail(r *run) string {
	var b bytes.Buffer
	b.WriteString(readTail(p.logPath(), r.logFrom))
	if out := readTail(p.outPath(), r.outFrom); out != "" {
		b.WriteString("\n--- stdout/stderr ---\n")
		b.WriteString(out)
	}
	return b.String()
}

// readTail returns at most tailBytes from the end of file path, starting no
// earlier than offset from.
func readTail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSizeOf(f)
	if size-from > tailBytes {
		from = size - tailBytes
	}
	if from < 0 || from > size {
		from = 0
	}
	buf, err := io.ReadAll(io.NewSectionReader(f, from, size-from))
	if err != nil {
		return ""
	}
	return string(buf)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func fileSizeOf(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}
