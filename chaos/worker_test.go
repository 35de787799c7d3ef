//go:build linux

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sys/unix"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// workerEnv carries a worker's JSON configuration; its presence makes the test
// binary run as a worker (see TestMain).
const workerEnv = "RELOCK_CHAOS_WORKER"

type workerConfig struct {
	ID       int
	Kind     string   // "mutex", "semaphore" or "rw" (RWMutex)
	LockAddr string   // the lock server, usually through a fault proxy
	Cluster  []string // instead: the masters of the lock's cluster (a cluster client)
	// Or instead: the Sentinels watching MasterSet, the lock's master (a
	// Sentinel client, which follows its failovers).
	Sentinel  []string
	MasterSet string
	// SendToReplicas: the cluster client sends read-only commands to
	// replicas (rueidis.ClientOption.SendToReplicas: cmd.IsReadOnly()).
	SendToReplicas bool
	ResAddr        string // the resource server
	Prefix         string
	Name           string
	Goroutines     int
	Total          int64 // operations in the whole run, over all workers
	Limit          int64 // 1 for a Mutex
	Watchdog       time.Duration
	Wait           time.Duration // Lock / Acquire wait timeout
	Work           time.Duration // time in the critical section
	LongEvery      int64         // every LongEvery-th operation is long (0: none)
	LongHold       time.Duration
	Reenter        bool   // Mutex: re-enter every hold once, and unlock that level before the last
	WriteEvery     int64  // RWMutex: every WriteEvery-th operation writes (see isWrite)
	Username       string // ACL user for the lock server ("": default user)
	Password       string
	// AckReplicas > 0: rlock.WithReplicaAck(AckReplicas, AckTimeout) and
	// rlock.WithReplicaAckRetry.
	AckReplicas int
	AckTimeout  time.Duration
	// Functions: rlock.WithRedisFunctions(true) (-chaos.functions).
	Functions bool
}

// isLong reports whether operation op holds the lock for LongHold.
func (cfg workerConfig) isLong(op int64) bool { return cfg.LongEvery > 0 && op%cfg.LongEvery == 0 }

// isWrite reports whether operation op of an RWMutex run takes the write lock
// (the others take the read lock): every WriteEvery-th operation, and every
// other long one, so that faults aimed at long holds find writers and
// readers alike.
func (cfg workerConfig) isWrite(op int64) bool {
	switch {
	case cfg.Kind != "rw":
		return false
	case cfg.isLong(op):
		return (op/cfg.LongEvery)%2 == 1
	}
	return cfg.WriteEvery > 0 && op%cfg.WriteEvery == 0
}

// event is one line a worker writes to stdout. Times are CLOCK_MONOTONIC
// nanoseconds, comparable between processes on the machine.
type event struct {
	Kind   string // "entered", "op", "done", "closed", "fatal"
	Worker int
	Op     int64
	Owner  string `json:",omitempty"`
	Long   bool   `json:",omitempty"`
	Write  bool   `json:",omitempty"` // RWMutex: the write lock (else the read lock)
	Token  uint64 `json:",omitempty"`

	T0, TAcq, TWrite, TEnd int64 `json:",omitempty"`

	AcqErr   string `json:",omitempty"`
	AcqClass string `json:",omitempty"` // "" (acquired), timeout, closed, ctx, redis, other
	Inside   int64  `json:",omitempty"` // workers inside, this one included

	ReadOK, WriteOK bool  `json:",omitempty"`
	Seq             int64 `json:",omitempty"`
	CtxDoneAtWrite  bool  `json:",omitempty"`
	// RWMutex readers read twice, on entering and at the end of the
	// critical section (at TWrite), and write nothing: ReadOK and Value are
	// the first read, Read2OK and Value2 the second (made only after an
	// accepted first one).
	Read2OK       bool  `json:",omitempty"`
	Value, Value2 int64 `json:",omitempty"`

	ReenterErr string `json:",omitempty"` // the re-entry failed (the level is not unlocked)
	InnerErr   string `json:",omitempty"` // unlocking the re-entered level failed
	InnerClass string `json:",omitempty"` // ok, lost, notheld, error

	ReleaseErr   string `json:",omitempty"`
	ReleaseClass string `json:",omitempty"` // ok, lost, notheld, error
	Cause        string `json:",omitempty"` // released, leaselost, held, other: ...

	Leaked int    `json:",omitempty"` // goroutines left after Close ("closed")
	Msg    string `json:",omitempty"`
}

func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// workerMain runs one worker process and returns its exit code.
func workerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker config:", err)
		return 2
	}
	w := &worker{cfg: cfg, out: bufio.NewWriter(os.Stdout)}
	if err := w.run(); err != nil {
		w.emit(event{Kind: "fatal", Worker: cfg.ID, Msg: err.Error()})
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

type worker struct {
	cfg workerConfig
	mu  sync.Mutex
	out *bufio.Writer
	res resource
	m   *rlock.Mutex
	rw  *rlock.RWMutex
	sem *semaphore.Semaphore
}

func (w *worker) emit(e event) {
	b, _ := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.out.Write(append(b, '\n'))
	_ = w.out.Flush()
}

func (w *worker) run() error {
	cfg := w.cfg
	resRC, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.ResAddr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer resRC.Close()
	lockOpt := rueidis.ClientOption{InitAddress: []string{cfg.LockAddr}, ForceSingleClient: true, DisableCache: true,
		Username: cfg.Username, Password: cfg.Password}
	switch {
	case len(cfg.Cluster) > 0:
		lockOpt.InitAddress, lockOpt.ForceSingleClient = cfg.Cluster, false
	case len(cfg.Sentinel) > 0:
		lockOpt.InitAddress, lockOpt.ForceSingleClient = cfg.Sentinel, false
		lockOpt.Sentinel = rueidis.SentinelOption{MasterSet: cfg.MasterSet}
	}
	if cfg.SendToReplicas {
		lockOpt.SendToReplicas = func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
	}
	lockRC, err := rueidis.NewClient(lockOpt)
	if err != nil {
		return err
	}
	defer lockRC.Close()
	// The shortest claim window, below the lease: every hand-off to a queued
	// Mutex waiter is granted for the window and extended by the watchdog, so
	// the faults hit claims too (see rlock.WithClaimWindow).
	opts := []rlock.Option{rlock.WithKeyPrefix(cfg.Prefix), rlock.WithWatchdogTimeout(cfg.Watchdog),
		rlock.WithClaimWindow(rlock.MinClaimWindow)}
	if cfg.AckReplicas > 0 {
		opts = append(opts, rlock.WithReplicaAck(cfg.AckReplicas, cfg.AckTimeout), rlock.WithReplicaAckRetry())
	}
	if cfg.Functions {
		opts = append(opts, rlock.WithRedisFunctions(true))
	}
	client, err := rlock.New(lockRC, opts...)
	if err != nil {
		return err
	}
	w.res = resource{c: resRC}
	switch cfg.Kind {
	case "mutex":
		w.m = client.Mutex(cfg.Name)
	case "rw":
		w.rw = client.RWMutex(cfg.Name)
	default:
		w.sem = semaphore.New(client, cfg.Name)
	}

	// Start when the controller says so: every worker is connected then.
	w.emit(event{Kind: "ready", Worker: cfg.ID})
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start signal: %w", err)
	}

	// Operations are bounded by the run: a worker that cannot finish in
	// time is reported by the controller as stuck.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var fatal error
	var fatalOnce sync.Once
	for g := range cfg.Goroutines {
		wg.Go(func() {
			if err := w.loop(ctx, g); err != nil {
				fatalOnce.Do(func() { fatal = err; cancel() })
			}
		})
	}
	wg.Wait()
	w.emit(event{Kind: "done", Worker: cfg.ID})

	// Stay connected until the controller has looked at subscriptions.
	_, _ = io.Copy(io.Discard, stdin)
	_ = client.Close()
	lockRC.Close()
	resRC.Close()
	leaked := leakedGoroutines(5 * time.Second)
	if len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "worker %d: %d goroutine(s) leaked:\n\n%s\n", cfg.ID, len(leaked), strings.Join(leaked, "\n\n"))
	}
	w.emit(event{Kind: "closed", Worker: cfg.ID, Leaked: len(leaked)})
	return fatal
}

func (w *worker) loop(ctx context.Context, g int) error {
	cfg := w.cfg
	for ctx.Err() == nil {
		opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		op, err := w.res.nextOp(opCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("resource: %w", err)
		}
		if op > cfg.Total {
			return nil
		}
		if err := w.operation(ctx, op); err != nil {
			return err
		}
	}
	return nil
}

// operation is one acquisition, read-modify-write of the resource and
// release (an RWMutex reader reads twice and writes nothing). Only resource
// errors are returned: the resource is never faulted.
func (w *worker) operation(ctx context.Context, op int64) error {
	cfg := w.cfg
	ev := event{Kind: "op", Worker: cfg.ID, Op: op, Owner: fmt.Sprintf("w%d.op%d", cfg.ID, op)}
	ev.Long = cfg.isLong(op)
	ev.Write = cfg.isWrite(op)
	ev.T0 = mono()
	var hold context.Context
	var err error
	switch {
	case w.m != nil:
		hold, err = w.m.Lock(ctx, rlock.WithWaitTimeout(cfg.Wait))
	case w.rw != nil && ev.Write:
		hold, err = w.rw.Lock(ctx, rlock.WithWaitTimeout(cfg.Wait))
	case w.rw != nil:
		hold, err = w.rw.RLock(ctx, rlock.WithWaitTimeout(cfg.Wait))
	default:
		hold, err = w.sem.Acquire(ctx, 1, semaphore.WithWaitTimeout(cfg.Wait))
	}
	ev.TAcq = mono()
	if err != nil {
		ev.AcqErr, ev.AcqClass = err.Error(), classifyAcquire(err)
		switch {
		case ev.AcqClass != "ctx" || ctx.Err() != nil:
		case time.Duration(ev.TAcq-ev.T0) >= cfg.Wait:
			// The wait timeout ran out, after attempts that could not reach
			// Redis (rlock reports ErrUnavailable then, not ErrLocked): a
			// process resumed after SIGSTOP finds its timers and its
			// connections' deadlines all passed at once.
			ev.AcqClass = "timeout"
		default:
			// Neither our context nor the wait timeout ended: the deadline
			// is another call's (rueidis fails every call on a connection
			// that one call's deadline broke). A connection error, reported
			// misleadingly.
			ev.AcqClass = "foreign-deadline"
		}
		ev.TEnd = ev.TAcq
		w.emit(ev)
		if errors.Is(err, semaphore.ErrNoLimit) {
			// The limit was lost with the server's data (a restart without
			// persistence): set it again, as every process does at start-up.
			_, _ = w.sem.TrySetLimit(ctx, cfg.Limit)
		}
		if ev.AcqClass == "redis" {
			time.Sleep(100 * time.Millisecond) // back off while Redis is unreachable
		}
		return nil
	}
	switch {
	case w.m != nil:
		ev.Token, _ = w.m.Token(hold)
	case w.rw != nil:
		ev.Token, _ = w.rw.Token(hold)
	}
	reentered := false
	if cfg.Reenter {
		// Re-entry with the lock context: the hold count goes to 2.
		if _, err := w.m.Lock(hold, rlock.WithWaitTimeout(cfg.Wait)); err != nil {
			ev.ReenterErr = err.Error()
		} else {
			reentered = true
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if w.rw != nil {
		ev.Inside, err = w.res.enterRW(rctx, ev.Owner, ev.Write)
	} else {
		ev.Inside, err = w.res.enter(rctx, ev.Owner, cfg.Limit)
	}
	if err != nil {
		return fmt.Errorf("resource enter: %w", err)
	}
	w.emit(event{Kind: "entered", Worker: cfg.ID, Op: op, Owner: ev.Owner, Long: ev.Long, Write: ev.Write, Token: ev.Token, TAcq: mono()})
	reader := w.rw != nil && !ev.Write
	switch {
	case reader:
		if ev.ReadOK, ev.Value, err = w.res.readShared(rctx, ev.Token, ev.Owner); err != nil {
			return fmt.Errorf("resource read: %w", err)
		}
	case w.m != nil || w.rw != nil:
		if ev.ReadOK, ev.Value, err = w.res.read(rctx, ev.Token, ev.Owner); err != nil {
			return fmt.Errorf("resource read: %w", err)
		}
	}
	work := cfg.Work
	if ev.Long {
		work = cfg.LongHold
	}
	time.Sleep(work) // simulated work in the critical section
	ev.CtxDoneAtWrite = hold.Err() != nil
	ev.TWrite = mono()
	switch {
	case reader && ev.ReadOK:
		// Deliberately no check of hold.Err(): fencing must stop a stale
		// read, and a reader must see no write during its hold.
		if ev.Read2OK, ev.Value2, err = w.res.readShared(rctx, ev.Token, ev.Owner); err != nil {
			return fmt.Errorf("resource read: %w", err)
		}
	case !reader && (w.m != nil || w.rw != nil) && ev.ReadOK:
		// Deliberately no check of hold.Err(): fencing must stop a stale write.
		if ev.WriteOK, ev.Seq, err = w.res.write(rctx, ev.Token, ev.Owner, ev.Value, ev.Value+1); err != nil {
			return fmt.Errorf("resource write: %w", err)
		}
	}
	if err := w.res.leave(rctx, ev.Owner); err != nil {
		return fmt.Errorf("resource leave: %w", err)
	}
	if reentered {
		err := w.m.Unlock(hold) // the re-entered level: the hold stays
		ev.InnerClass = classifyRelease(err)
		if err != nil {
			ev.InnerErr = err.Error()
		}
	}
	err = w.release(hold, ev.Write)
	ev.ReleaseClass = classifyRelease(err)
	if err != nil {
		ev.ReleaseErr = err.Error()
	}
	// The hold context must end: at once after a release, or when the lease
	// is found lost.
	select {
	case <-hold.Done():
	case <-time.After(3*cfg.Watchdog + 10*time.Second):
	}
	ev.Cause = classifyCause(context.Cause(hold))
	ev.TEnd = mono()
	w.emit(ev)
	return nil
}

// release releases the hold; a release that failed for a connection error
// (Redis down longer than the unlock timeout) is retried once.
func (w *worker) release(hold context.Context, write bool) error {
	do := func() error {
		switch {
		case w.m != nil:
			return w.m.Unlock(hold)
		case w.rw != nil && write:
			return w.rw.Unlock(hold)
		case w.rw != nil:
			return w.rw.RUnlock(hold)
		}
		return w.sem.Release(hold)
	}
	err := do()
	if err != nil && classifyRelease(err) == "error" {
		err = do()
	}
	return err
}

func classifyAcquire(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rlock.ErrLocked), errors.Is(err, semaphore.ErrNoPermits):
		return "timeout"
	case errors.Is(err, rlock.ErrClosed):
		return "closed"
	case errors.Is(err, semaphore.ErrNoLimit):
		return "nolimit"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	case strings.HasPrefix(err.Error(), "rlock: "), strings.HasPrefix(err.Error(), "semaphore: "):
		return "redis" // a Redis or connection error, wrapped with the operation and name
	}
	return "other"
}

func classifyRelease(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, rlock.ErrLeaseLost) && (errors.Is(err, rlock.ErrNotHeld) || errors.Is(err, semaphore.ErrNotHeld)):
		return "lost"
	case errors.Is(err, rlock.ErrNotHeld), errors.Is(err, semaphore.ErrNotHeld):
		return "notheld"
	}
	return "error"
}

func classifyCause(cause error) string {
	switch {
	case cause == nil:
		return "held"
	case errors.Is(cause, rlock.ErrUnlocked), errors.Is(cause, semaphore.ErrReleased):
		return "released"
	case errors.Is(cause, rlock.ErrLeaseLost):
		return "leaselost"
	}
	return "other: " + cause.Error()
}

// leakMarkers select the goroutines that count as leaks in a worker.
var leakMarkers = []string{"github.com/relockio/relock/", "github.com/redis/rueidis"}

func leakedGoroutines(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var out []string
		for _, st := range strings.Split(strings.TrimSpace(string(buf)), "\n\n")[1:] {
			for _, mark := range leakMarkers {
				if strings.Contains(st, mark) && !strings.Contains(st, "chaos_test.workerMain") {
					out = append(out, st)
					break
				}
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}
