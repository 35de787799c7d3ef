package redistest

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
)

// KeepHeld keeps a lock or permit context reachable until the test ends. A
// test whose hold is never released (it stands for a holder that hangs or
// crashed) must keep its context: a hold whose context is garbage is released
// (see rlock's "Lock context").
func KeepHeld(tb testing.TB, lockCtx context.Context) {
	tb.Cleanup(func() { runtime.KeepAlive(lockCtx) })
}

// LogBuffer is a log destination safe for concurrent use (slog handlers
// write from the goroutines that log).
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
