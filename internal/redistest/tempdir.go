package redistest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// tempPrefix starts the name of every server directory; the owning process
// id follows, so directories left by a process that died without cleaning
// up can be recognised and removed.
const tempPrefix = "redistest-"

var sweepOnce sync.Once

// makeTempDir creates a server's working directory, first (once per process)
// removing directories of earlier processes that are no longer running.
func makeTempDir() (string, error) {
	sweepOnce.Do(sweepStaleDirs)
	return os.MkdirTemp("", tempPrefix+strconv.Itoa(os.Getpid())+"-")
}

func sweepStaleDirs() {
	matches, err := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*-*"))
	if err != nil {
		return
	}
	for _, dir := range matches {
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), tempPrefix), "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// Only remove when the owner is certainly gone; EPERM means it is
		// alive but someone else's.
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}
