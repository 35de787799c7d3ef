package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WaitStopped waits until every thread of process pid is stopped, as a
// SIGSTOP leaves it. kill(2) returns once the signal is pending: each
// thread stops only when it next runs in the kernel, so on a loaded machine
// a thread that was runnable (a Go process's network poller, say) may still
// run for milliseconds, and read and act on what arrived meanwhile. A test
// that pauses a process and then expects it to miss something waits here
// first. Where /proc is missing (not Linux) it returns nil at once; it
// returns ctx's error if ctx ends first, and an error if pid is not running.
func WaitStopped(ctx context.Context, pid int) error {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	if _, err := os.Stat("/proc/self/task"); err != nil {
		return nil
	}
	for {
		running, err := runningThreads(dir)
		if err != nil {
			return fmt.Errorf("redistest: process %d: %w", pid, err)
		}
		if running == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: process %d: %d thread(s) not stopped: %w", pid, running, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// runningThreads counts the threads of the process at dir (/proc/<pid>) that
// are not stopped, from the state in each thread's stat file.
func runningThreads(dir string) (int, error) {
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, errors.New("no threads")
	}
	running := 0
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, "task", task.Name(), "stat"))
		if err != nil {
			continue // the thread exited meanwhile
		}
		// The state follows the command name, which is in parentheses and
		// may hold anything.
		_, after, ok := strings.Cut(string(data[strings.LastIndexByte(string(data), ')')+1:]), " ")
		if !ok || after == "" {
			return 0, fmt.Errorf("unexpected stat line %q", data)
		}
		switch after[0] {
		case 'T', 't', 'Z', 'X':
		default:
			running++
		}
	}
	return running, nil
}
