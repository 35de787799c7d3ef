package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// The parent and its workers talk in JSON lines: the parent writes a job, the
// worker opens its clients and answers "ready"; once every worker of the run
// is ready the parent writes "go" to all of them at once, and each answers
// with its result after its goroutines are done; "close" makes it close its
// clients and answer "closed". A worker serves jobs until its input ends.

type toWorker struct {
	Cmd string `json:"cmd"` // job, go, close
	Job *Job   `json:"job,omitempty"`
}

type fromWorker struct {
	Type   string        `json:"type"` // ready, result, closed, error
	Error  string        `json:"error,omitempty"`
	Result *WorkerResult `json:"result,omitempty"`
}

// workerMain serves jobs on stdin and stdout.
func workerMain() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	next := func(want string) (toWorker, bool) {
		var m toWorker
		if !in.Scan() {
			return m, false
		}
		if err := json.Unmarshal(in.Bytes(), &m); err != nil || (want != "" && m.Cmd != want) {
			fmt.Fprintf(os.Stderr, "bench worker: expected %q, got %q (%v)\n", want, in.Text(), err)
			return m, false
		}
		return m, true
	}
	for {
		m, ok := next("job")
		if !ok || m.Job == nil {
			return 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		l, err := openJob(ctx, *m.Job)
		cancel()
		if err != nil {
			_ = out.Encode(fromWorker{Type: "error", Error: err.Error()})
			continue
		}
		if err := out.Encode(fromWorker{Type: "ready"}); err != nil {
			l.close()
			return 1
		}
		if _, ok := next("go"); !ok {
			l.close()
			return 1
		}
		res := l.run()
		if err := out.Encode(fromWorker{Type: "result", Result: &res}); err != nil {
			l.close()
			return 1
		}
		_, ok = next("close")
		l.close()
		if !ok {
			return 1
		}
		if err := out.Encode(fromWorker{Type: "closed"}); err != nil {
			return 1
		}
	}
}

// jobRunner is a job opened in a worker: run it once "go" came, close it
// once "close" came.
type jobRunner interface {
	run() WorkerResult
	close()
}

func openJob(ctx context.Context, job Job) (jobRunner, error) {
	switch job.Mode {
	case "":
		l, err := openLoad(ctx, job)
		if err != nil {
			return nil, err // not a nil *load in an interface
		}
		return l, nil
	case "subscribe":
		s, err := openSubscriber(ctx, job)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown job mode %q", job.Mode)
}

// workerProc is the parent's handle on one worker process.
type workerProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	msgs chan fromWorker
	dead chan struct{} // closed when its output ends
	err  error         // why, valid after dead
}

func startWorker() (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-worker")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &workerProc{cmd: cmd, in: in, msgs: make(chan fromWorker, 4), dead: make(chan struct{})}
	go func() {
		dec := json.NewDecoder(bufio.NewReaderSize(out, 1<<20))
		for {
			var m fromWorker
			if err := dec.Decode(&m); err != nil {
				w.err = err
				close(w.dead)
				return
			}
			w.msgs <- m
		}
	}()
	return w, nil
}

func (w *workerProc) send(m toWorker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.in.Write(append(b, '\n'))
	return err
}

// recv waits for the worker's next message of type want.
func (w *workerProc) recv(ctx context.Context, want string) (fromWorker, error) {
	select {
	case m := <-w.msgs:
		if m.Type == "error" {
			return m, errors.New(m.Error)
		}
		if m.Type != want {
			return m, fmt.Errorf("worker said %q, expected %q", m.Type, want)
		}
		return m, nil
	case <-w.dead:
		return fromWorker{}, fmt.Errorf("worker exited: %v", w.err)
	case <-ctx.Done():
		return fromWorker{}, fmt.Errorf("no %q from worker: %w", want, ctx.Err())
	}
}

// stop ends the worker: closing its input makes it exit.
func (w *workerProc) stop() {
	_ = w.in.Close()
	select {
	case <-w.dead:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
	}
	_ = w.cmd.Wait()
}

// workerPool keeps worker processes between runs.
type workerPool struct {
	mu      sync.Mutex
	workers []*workerProc
}

// get returns n workers, starting more if needed.
func (p *workerPool) get(n int) ([]*workerProc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.workers) < n {
		w, err := startWorker()
		if err != nil {
			return nil, fmt.Errorf("start worker: %w", err)
		}
		p.workers = append(p.workers, w)
	}
	return p.workers[:n], nil
}

// discard stops workers that failed, so that the next run starts fresh ones.
func (p *workerPool) discard(ws []*workerProc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range ws {
		for i, x := range p.workers {
			if x == w {
				p.workers = append(p.workers[:i], p.workers[i+1:]...)
				break
			}
		}
		w.stop()
	}
}

func (p *workerPool) close() {
	p.mu.Lock()
	ws := p.workers
	p.workers = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(w.stop)
	}
	wg.Wait()
}
