package redistest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// WaitStopped returns once a SIGSTOPped process is stopped, and waits while
// it runs.
func TestWaitStopped(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: WaitStopped returns at once")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := WaitStopped(ctx, pid); err == nil {
		t.Fatal("WaitStopped returned nil for a running process")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitStopped(ctx, pid); err != nil {
		t.Fatal(err)
	}
	if n, err := runningThreads("/proc/" + strconv.Itoa(pid)); err != nil || n != 0 {
		t.Fatalf("%d thread(s) running after WaitStopped (%v)", n, err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(context.Background(), 1<<30); err == nil {
		t.Fatal("WaitStopped returned nil for a process that does not exist")
	}
}
