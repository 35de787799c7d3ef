//go:build linux

package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// run is one scenario in progress: the servers, a proxy and a process per
// worker, the events they reported and the faults injected.
type run struct {
	t       *testing.T
	sc      scenario
	cfg     workerConfig       // common part of the workers' configuration
	lock    *redistest.Server  // on a cluster: the master of the lock's slot
	cluster *redistest.Cluster // the lock's cluster, in a cluster scenario
	// sentinel is the lock's Sentinel group, in a sentinel scenario.
	sentinel *redistest.SentinelGroup
	res      *redistest.Server
	resRC    rueidis.Client
	proxies  []*faultproxy.Proxy
	procs    []*exec.Cmd
	stdins   []io.WriteCloser
	stderrs  []*lockedWriter

	// leftoverPatience bounds the wait for leftovers to go (0: default).
	leftoverPatience time.Duration

	ctx     context.Context // ends when the workload is over
	entered chan event      // "entered" events, for targeted faults

	mu      sync.Mutex
	events  []event
	faults  []fault
	targets map[string]targetFault // operations a fault was aimed at, by owner
	forced  []forceUnlock          // ForceUnlock calls, in order
	notes   []string               // the injector's remarks, for the notes
	ready   map[int]bool
	done    map[int]bool
	closed  map[int]event
}

type fault struct {
	kind       string
	start, end int64 // monotonic ns
}

// fault records a fault that lasted from start to now.
func (r *run) fault(kind string, start int64) {
	r.mu.Lock()
	r.faults = append(r.faults, fault{kind: kind, start: start, end: mono()})
	r.mu.Unlock()
}

// forceUnlock is one Mutex.ForceUnlock call of the controller: its monotonic
// start and end, the fencing counter read just before it, and whether it
// deleted a lock.
type forceUnlock struct {
	start, end int64
	fence      uint64
	deleted    bool
}

type targetFault struct {
	kind  string
	start int64
}

func (r *run) target(owner, kind string, start int64) {
	r.mu.Lock()
	r.targets[owner] = targetFault{kind: kind, start: start}
	r.mu.Unlock()
}

// progress is the number of operations started so far.
func (r *run) progress() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := r.resRC.Do(ctx, r.resRC.B().Get().Key(resOps).Build()).AsInt64()
	if err != nil {
		return 0
	}
	return n
}

// waitProgress waits until n operations have started or the run is over.
func (r *run) waitProgress(n int64) bool {
	for r.progress() < n {
		if !r.pause(20 * time.Millisecond) {
			return false
		}
	}
	return true
}

// pause waits d, or less when the run ends; it reports whether the run goes on.
func (r *run) pause(d time.Duration) bool {
	select {
	case <-r.ctx.Done():
		return false
	case <-time.After(d): // fault timing, not synchronisation
		return true
	}
}

const (
	workers    = 3
	goroutines = 2
)

// execute runs the scenario to the end and returns its result.
func execute(t *testing.T, sc scenario, ops int64) result {
	t.Helper()
	r := &run{
		t: t, sc: sc,
		entered: make(chan event, 1024),
		targets: map[string]targetFault{},
		ready:   map[int]bool{},
		done:    map[int]bool{},
		closed:  map[int]event{},
	}
	if sc.cluster || sc.sentinel {
		r.res = redistest.NewN(t, 1)[0]
	} else {
		servers := redistest.NewN(t, 2, redistest.WithDebugCommand())
		r.lock, r.res = servers[0], servers[1]
	}
	r.resRC = redistest.Client(t, r.res)
	limit := int64(1)
	if sc.kind == "semaphore" {
		limit = semLimit
	}
	r.cfg = workerConfig{
		Kind: sc.kind, ResAddr: r.res.Addr(), Prefix: "chaos", Name: "res",
		Goroutines: sc.workerGoroutines(), Total: ops, Limit: limit,
		Watchdog: sc.leaseOf(), Wait: waitTimeout, Work: 2 * time.Millisecond,
		LongEvery: sc.longEvery, LongHold: sc.longHold,
		Reenter:   sc.reenter && sc.kind == "mutex",
		Functions: *functions,
	}
	if sc.kind == "rw" {
		r.cfg.WriteEvery = rwWrites
	}
	r.cfg.SendToReplicas = sc.sendToReplicas
	switch {
	case sc.cluster:
		r.startCluster()
	case sc.sentinel:
		r.startSentinel()
	}
	if sc.setup != nil {
		sc.setup(r)
	}
	if sc.kind == "semaphore" {
		setLimit(t, r.lock, limit)
	}
	if sc.acl {
		if err := r.setACL(aclRules...); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", aclUser, err)
		}
		r.cfg.Username, r.cfg.Password = aclUser, aclPassword
	}

	for i := range workers {
		if sc.cluster || sc.sentinel {
			r.startWorker(i, "") // a cluster or Sentinel client (r.cfg.Cluster, r.cfg.Sentinel)
			continue
		}
		p, err := faultproxy.Start(r.lock.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		r.proxies = append(r.proxies, p)
		r.startWorker(i, p.Addr())
	}

	if !r.waitWorkers(func() bool { return len(r.ready) == workers }, time.Minute) {
		t.Fatal("workers did not start")
	}
	for _, in := range r.stdins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}

	// The workload ends when every worker reported "done" (or died).
	runCtx, stopFaults := context.WithCancel(context.Background())
	r.ctx = runCtx
	var injector sync.WaitGroup
	if sc.inject != nil {
		injector.Go(func() { sc.inject(r, *fullRun) })
	}
	started := time.Now()
	if !r.waitWorkers(func() bool { return len(r.done) == workers }, runBound(ops)) {
		r.dumpStuck()
	}
	stopFaults()
	injector.Wait()
	r.undoFaults()
	elapsed := time.Since(started)

	res := r.check(elapsed)
	if sc.inject != nil && sc.fullOnly && res.faults == 0 {
		// A fault scenario that injected nothing tested nothing (a fault
		// aimed at a command shape the library no longer sends, say).
		res.violation("no fault was injected")
	}
	if *logDir != "" {
		r.writeLog(filepath.Join(*logDir, strings.ReplaceAll(sc.kind+"-"+sc.name, "/", "-")+".jsonl"))
	}
	// Let the workers close their clients and report leaks.
	for _, in := range r.stdins {
		_ = in.Close()
	}
	r.waitWorkers(func() bool { return len(r.closed) == workers }, 30*time.Second)
	r.reap()
	for id, ev := range r.closed {
		if ev.Leaked > 0 {
			res.violation("worker %d leaked %d goroutine(s)", id, ev.Leaked)
		}
	}
	return res
}

// runBound is how long a run may take before its waiters count as stuck.
func runBound(ops int64) time.Duration { return time.Minute + time.Duration(ops)*200*time.Millisecond }

// dumpStuck makes every worker that is not done print its goroutines
// (SIGQUIT) and logs them: its unfinished operations are reported as stuck.
func (r *run) dumpStuck() {
	r.mu.Lock()
	var stuck []int
	for i := range r.procs {
		if !r.done[i] {
			stuck = append(stuck, i)
		}
	}
	r.mu.Unlock()
	for _, i := range stuck {
		_ = r.procs[i].Process.Signal(syscall.SIGCONT)
		_ = r.procs[i].Process.Signal(syscall.SIGQUIT)
	}
	r.waitWorkers(func() bool {
		for _, i := range stuck {
			if !r.done[i] {
				return false
			}
		}
		return true
	}, 30*time.Second)
	for _, i := range stuck {
		s := r.stderrs[i].String()
		if len(s) > 256<<10 {
			s = s[len(s)-256<<10:]
		}
		r.t.Errorf("worker %d did not finish its operations in %v; its goroutines:\n%s", i, runBound(r.cfg.Total), s)
	}
}

func (r *run) startWorker(id int, lockAddr string) {
	t := r.t
	cfg := r.cfg
	cfg.ID, cfg.LockAddr = id, lockAddr
	raw, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &lockedWriter{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.procs = append(r.procs, cmd)
	r.stdins = append(r.stdins, stdin)
	r.stderrs = append(r.stderrs, stderr)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	go r.readEvents(id, stdout)
}

// lockedWriter collects a worker's stderr; it is written by exec's copying
// goroutine and read by the test.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (r *run) readEvents(id int, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // not ours (a stray print)
		}
		r.mu.Lock()
		switch ev.Kind {
		case "entered":
			select {
			case r.entered <- ev:
			default:
			}
		case "op":
			r.events = append(r.events, ev)
		case "ready":
			r.ready[id] = true
		case "done":
			r.done[id] = true
		case "closed":
			r.closed[id] = ev
		case "fatal":
			r.events = append(r.events, ev)
		}
		r.mu.Unlock()
	}
	// The process ended: it will report nothing more.
	r.mu.Lock()
	r.done[id] = true
	if _, ok := r.closed[id]; !ok {
		r.closed[id] = event{Kind: "closed", Worker: id}
	}
	r.mu.Unlock()
}

// waitWorkers polls until cond holds (under r.mu) or bound passes.
func (r *run) waitWorkers(cond func() bool, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// undoFaults ends every fault still in force, so that the leftover checks
// see a healthy system.
func (r *run) undoFaults() {
	if r.cluster != nil {
		r.undoClusterFaults()
		return
	}
	if r.sentinel != nil {
		r.undoSentinelFaults()
		return
	}
	for _, p := range r.proxies {
		p.Resume()
		p.Block(false)
		p.DropMessages(false)
		p.SetLatency(0)
		p.CancelLosses()
	}
	_ = r.lock.Resume()
	for _, c := range r.procs {
		_ = c.Process.Signal(syscall.SIGCONT)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.lock.Ping(ctx) != nil {
		_ = r.lock.Restart(ctx)
	}
	if r.sc.acl {
		if err := r.setACL(aclRestore...); err != nil {
			r.t.Errorf("ACL SETUSER %s: %v", aclUser, err)
		}
	}
}

// setACL applies ACL rules to the workers' user on the lock server.
func (r *run) setACL(rules ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.lock.Do(ctx, append([]string{"ACL", "SETUSER", aclUser}, rules...)...)
	return err
}

// writeLog writes every operation and fault of the run as JSON lines.
func (r *run) writeLog(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, f := range r.faults {
		_ = enc.Encode(map[string]any{"Kind": "fault", "Fault": f.kind, "Start": f.start, "End": f.end})
	}
	for _, e := range r.events {
		_ = enc.Encode(e)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		r.t.Error(err)
		return
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		r.t.Error(err)
	}
}

// reap waits for the workers to exit, killing any that does not.
func (r *run) reap() {
	for i, c := range r.procs {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				r.t.Errorf("worker %d: %v\n%s", i, err, tail(r.stderrs[i]))
			}
		case <-time.After(30 * time.Second):
			_ = c.Process.Kill()
			<-done
			r.t.Errorf("worker %d did not exit; killed\n%s", i, tail(r.stderrs[i]))
		}
	}
}

func tail(b *lockedWriter) string {
	s := b.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// setLimit sets the semaphore's limit before the workers start.
func setLimit(t *testing.T, srv *redistest.Server, limit int64) {
	t.Helper()
	rc := redistest.Client(t, srv)
	c, err := rlock.New(rc, rlock.WithKeyPrefix("chaos"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := semaphore.New(c, "res").TrySetLimit(ctx, limit); err != nil {
		t.Fatal(err)
	}
}

// signal sends sig to worker i's process (SIGSTOP, SIGCONT).
func (r *run) signal(i int, sig syscall.Signal) {
	if err := r.procs[i].Process.Signal(sig); err != nil {
		r.t.Logf("signal %v to worker %d: %v", sig, i, err)
	}
}
