package redistest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

var (
	// ErrNotOwned is returned by fault-injection methods of a server this
	// process does not own (one attached with [Attach] or taken from
	// REDIS_ADDR).
	ErrNotOwned = errors.New("redistest: server is not owned by this process (REDIS_ADDR or Attach); it cannot be killed, paused or restarted")
	// ErrClosed is returned by methods of a server after [Server.Close].
	ErrClosed = errors.New("redistest: server is closed")
	// ErrNotRunning is returned by Pause and Resume after Kill.
	ErrNotRunning = errors.New("redistest: server is not running (killed)")
)

// opTimeout bounds the methods that take no context (Kill, Pause, Resume,
// Close); it only matters for the container backend.
const opTimeout = 30 * time.Second

// backend is one way of running a Redis on a fixed address.
type backend interface {
	// start (re)starts the server on its address and returns once it
	// answers PING.
	start(ctx context.Context) error
	// kill stops the server at once; its data is lost.
	kill(ctx context.Context) error
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// destroy releases everything; the server may be running, paused or
	// killed.
	destroy(ctx context.Context) error
}

type state int

const (
	stateRunning state = iota
	statePaused
	stateKilled
	stateClosed
)

// Server is one Redis server: owned (a process or container started by this
// package) or attached (shared, not owned). Its methods are safe for
// concurrent use.
type Server struct {
	addr    string
	b       backend // nil when not owned
	release func()  // frees the reserved port; nil when not owned

	mu    sync.Mutex
	state state
}

func newServer(addr string, b backend, release func()) *Server {
	s := &Server{addr: addr, b: b, release: release}
	if b != nil {
		track(s)
	}
	return s
}

// Attach wraps an existing server at addr (host:port) that this process does
// not own, after checking that it answers PING. Close does nothing to it, and
// Kill, Restart, Pause and Resume return [ErrNotOwned].
func Attach(ctx context.Context, addr string) (*Server, error) {
	if err := ping(ctx, addr); err != nil {
		return nil, fmt.Errorf("redistest: attach %s: %w", addr, err)
	}
	return newServer(addr, nil, nil), nil
}

// Addr returns the server's address, "127.0.0.1:PORT" for owned servers. It
// stays the same across Kill and Restart.
func (s *Server) Addr() string { return s.addr }

// Owned reports whether this process owns the server and so can kill,
// pause and restart it.
func (s *Server) Owned() bool { return s.b != nil }

// String returns the address, for log messages.
func (s *Server) String() string { return s.addr }

// check returns the error for a fault-injection call in the current state.
// The caller holds s.mu.
func (s *Server) check() error {
	if s.b == nil {
		return ErrNotOwned
	}
	if s.state == stateClosed {
		return ErrClosed
	}
	return nil
}

// Kill stops the server with SIGKILL (docker stop for a container), reaps
// it, and keeps its port for [Server.Restart]. All data is lost. Killing a
// killed server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	if s.state == stateKilled {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.b.kill(ctx); err != nil {
		return fmt.Errorf("redistest: kill %s: %w", s.addr, err)
	}
	s.state = stateKilled
	return nil
}

// Restart starts the server again on the same port and waits until it
// answers PING. A running or paused server is killed first. Unless
// persistence was enabled with [WithArgs], the restarted server is empty.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	if s.state != stateKilled {
		if err := s.b.kill(ctx); err != nil {
			return fmt.Errorf("redistest: restart %s: kill: %w", s.addr, err)
		}
		s.state = stateKilled
	}
	if err := s.b.start(ctx); err != nil {
		return fmt.Errorf("redistest: restart %s: %w", s.addr, err)
	}
	s.state = stateRunning
	return nil
}

// Pause freezes the server (SIGSTOP, or docker pause): connections stay
// open, but nothing is answered until [Server.Resume]. Pausing a paused
// server does nothing.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	switch s.state {
	case statePaused:
		return nil
	case stateKilled:
		return ErrNotRunning
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.b.pause(ctx); err != nil {
		return fmt.Errorf("redistest: pause %s: %w", s.addr, err)
	}
	s.state = statePaused
	return nil
}

// Resume continues a paused server (SIGCONT, or docker unpause). Resuming a
// running server does nothing.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	switch s.state {
	case stateRunning:
		return nil
	case stateKilled:
		return ErrNotRunning
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.b.resume(ctx); err != nil {
		return fmt.Errorf("redistest: resume %s: %w", s.addr, err)
	}
	s.state = stateRunning
	return nil
}

// Close stops an owned server (even a paused one), reaps it and removes its
// files and port reservation. For an attached server it does nothing. Close
// is idempotent; only the first call can return an error.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateClosed {
		return nil
	}
	s.state = stateClosed
	if s.b == nil {
		return nil
	}
	untrack(s)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := s.b.destroy(ctx)
	s.release()
	if err != nil {
		return fmt.Errorf("redistest: close %s: %w", s.addr, err)
	}
	return nil
}

// Ping sends PING over a fresh TCP connection and waits for +PONG until ctx
// is done. With a short deadline it tells whether the server is answering,
// e.g. that a paused server is not.
func (s *Server) Ping(ctx context.Context) error {
	return ping(ctx, s.addr)
}

// Client returns a new rueidis client for this server; the caller closes it.
// The defaults are InitAddress = [Addr] and ForceSingleClient (the server is
// standalone, so no cluster probing); opts may change any field.
func (s *Server) Client(opts ...func(*rueidis.ClientOption)) (rueidis.Client, error) {
	o := rueidis.ClientOption{
		InitAddress:       []string{s.addr},
		ForceSingleClient: true,
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redistest: client for %s: %w", s.addr, err)
	}
	return c, nil
}
