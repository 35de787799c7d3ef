package semaphore_test

// What an acquisition costs Redis under contention: the one-permit semaphore
// (semaphore.NewLock) side by side with rlock.Mutex, measured with Redis's own
// counters (INFO commandstats after CONFIG RESETSTAT, INFO cpu).

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relockio/relock/semaphore"
)

// cost is what Redis did per acquisition during a measured run.
type cost struct {
	acquisitions int64
	commands     float64 // every command, those run inside scripts included
	scripts      float64 // EVALSHA and EVAL calls
	publishes    float64
	cpu          time.Duration // server CPU (user + system)
}

func (c cost) String() string {
	return "commands " + strconv.FormatFloat(c.commands, 'f', 1, 64) +
		", scripts " + strconv.FormatFloat(c.scripts, 'f', 2, 64) +
		", publishes " + strconv.FormatFloat(c.publishes, 'f', 2, 64) +
		", server CPU " + c.cpu.Round(100*time.Nanosecond).String()
}

// serverCPU returns used_cpu_user + used_cpu_sys of INFO cpu.
func (e *env) serverCPU() time.Duration {
	e.t.Helper()
	msg, err := e.srv.Do(e.ctx, "INFO", "cpu")
	if err != nil {
		e.t.Fatalf("INFO cpu: %v", err)
	}
	text, _ := msg.ToString()
	var total float64
	for line := range strings.Lines(text) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				e.t.Fatalf("INFO cpu line %q: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// measure resets Redis's statistics, runs fn, and returns what Redis did per
// acquisition of the n that fn made. The commands of the measurement itself
// (INFO, CONFIG, the handshakes of its connections) are left out.
func (e *env) measure(n int64, fn func()) cost {
	e.t.Helper()
	if _, err := e.srv.Do(e.ctx, "CONFIG", "RESETSTAT"); err != nil {
		e.t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	cpu := e.serverCPU()
	fn()
	cpu = e.serverCPU() - cpu
	stats, err := e.srv.CommandStats(e.ctx)
	if err != nil {
		e.t.Fatalf("CommandStats: %v", err)
	}
	var all int64
	for cmd, calls := range stats {
		if cmd != "info" && cmd != "hello" && cmd != "config|resetstat" && !strings.HasPrefix(cmd, "client|") {
			all += calls
		}
	}
	per := func(x int64) float64 { return float64(x) / float64(n) }
	if testing.Verbose() {
		var parts []string
		for cmd, calls := range stats {
			if cmd != "info" && cmd != "hello" && cmd != "config|resetstat" && !strings.HasPrefix(cmd, "client|") {
				parts = append(parts, cmd+" "+strconv.FormatFloat(per(calls), 'f', 2, 64))
			}
		}
		slices.Sort(parts)
		e.t.Logf("per acquisition: %s", strings.Join(parts, ", "))
	}
	return cost{
		acquisitions: n,
		commands:     per(all),
		scripts:      per(stats["evalsha"] + stats["eval"]),
		publishes:    per(stats["publish"] + stats["spublish"]),
		cpu:          cpu / time.Duration(n),
	}
}

// contend has one goroutine per locker take and release its lock in a loop
// until total acquisitions are made, every hand-off going from one Client to
// another (no goroutines of one Client contend, so the Mutex cannot pass
// the lock within a Client).
func contend(t *testing.T, total int64, lockers []func() (unlock func() error, err error)) {
	t.Helper()
	var left atomic.Int64
	left.Store(total)
	var wg sync.WaitGroup
	for _, lock := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				unlock, err := lock()
				if err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				if err := unlock(); err != nil {
					t.Errorf("unlock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCostPerAcquisition compares what an acquisition of semaphore.NewLock
// and of rlock.Mutex costs Redis when 4 Clients, one goroutine each, contend
// for one lock with an empty critical section: nearly every acquisition then
// queues and is handed over by the holder's release.
func TestCostPerAcquisition(t *testing.T) {
	e := ownedEnv(t)
	const (
		clients = 4
		total   = 600
	)
	var semLockers, mutexLockers []func() (func() error, error)
	for range clients {
		c := e.client()
		l := semaphore.NewLock(c, "cost-sem")
		semLockers = append(semLockers, func() (func() error, error) {
			lockCtx, err := l.Lock(e.ctx)
			return func() error { return l.Unlock(lockCtx) }, err
		})
		m := c.Mutex("cost-mutex")
		mutexLockers = append(mutexLockers, func() (func() error, error) {
			lockCtx, err := m.Lock(e.ctx)
			return func() error { return m.Unlock(lockCtx) }, err
		})
	}
	// Warm up: connections dialled, scripts loaded, channels subscribed.
	contend(t, 4*clients, semLockers)
	contend(t, 4*clients, mutexLockers)

	sem := e.measure(total, func() { contend(t, total, semLockers) })
	mutex := e.measure(total, func() { contend(t, total, mutexLockers) })
	t.Logf("per acquisition, %d Clients x 1 goroutine, %d acquisitions:", clients, total)
	t.Logf("  semaphore.NewLock: %v", sem)
	t.Logf("  rlock.Mutex:       %v", mutex)
	t.Logf("  ratio:             commands %.2fx, server CPU %.2fx",
		sem.commands/mutex.commands, float64(sem.cpu)/float64(mutex.cpu))
}
