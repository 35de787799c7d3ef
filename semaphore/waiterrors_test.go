package semaphore_test

// What an Acquire that ends without the permits reports: ErrNoPermits when
// Redis said they are taken (however short the wait timeout, and when ctx's
// own deadline ends the wait), ErrUnavailable only when Redis could not be
// reached.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// 20 goroutines on 4 Clients acquire a permit of a few semaphores of limit 1
// in a loop with wait timeouts of 1-5ms: Redis is healthy, so every failure
// is ErrNoPermits, never ErrUnavailable.
func TestShortWaitTimeoutUnderContentionIsNoPermits(t *testing.T) {
	e := ownedEnv(t)
	clients := make([]*rlock.Client, 4)
	for i := range clients {
		clients[i] = e.client()
	}
	for i := range 3 {
		e.sem(clients[0], fmt.Sprint("n", i), 1)
	}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		bad              []error
		failed, acquired int
	)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for i := range 40 {
				s := semaphore.New(c, fmt.Sprint("n", (g+i)%3))
				wait := time.Duration(1+(g+i)%5) * time.Millisecond
				permitCtx, err := s.Acquire(e.ctx, 1, semaphore.WithWaitTimeout(wait))
				mu.Lock()
				switch {
				case err == nil:
					acquired++
				case errors.Is(err, semaphore.ErrNoPermits) && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, semaphore.ErrUnavailable):
					failed++
				default:
					bad = append(bad, err)
				}
				mu.Unlock()
				if err == nil {
					if err := s.Release(permitCtx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquired, %d timed out as ErrNoPermits, %d other errors", acquired, failed, len(bad))
	for i, err := range bad {
		if i == 5 {
			break
		}
		t.Errorf("a wait under contention, Redis healthy, failed with %v (ErrUnavailable: %v)", err, errors.Is(err, semaphore.ErrUnavailable))
	}
}

// ctx's own deadline, not a wait timeout, ends an Acquire behind another
// Client's permit: the error says the permits are taken, and that ctx ran out.
func TestCtxDeadlineWhileTakenIsNoPermits(t *testing.T) {
	e := newEnv(t)
	holder, waiter := e.client(), e.client()
	held, err := e.sem(holder, "taken", 1).Acquire(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = semaphore.New(holder, "taken").Release(held) }()
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	_, err = semaphore.New(waiter, "taken").Acquire(ctx, 1)
	if !errors.Is(err, semaphore.ErrNoPermits) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire behind another Client's permit, ended by ctx's deadline: %v; want ErrNoPermits and context.DeadlineExceeded", err)
	}
}

// TryAcquire against a Redis that is down says so.
func TestTryAcquireRedisDownIsUnavailable(t *testing.T) {
	e := ownedEnv(t)
	c := e.client()
	s := e.sem(c, "down", 2) // the connection is up and the scripts are loaded
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // connection reset or EOF first, then refused
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		_, err := s.TryAcquire(ctx, 1)
		cancel()
		if !errors.Is(err, semaphore.ErrUnavailable) {
			t.Fatalf("TryAcquire %d with Redis down: %v; want ErrUnavailable", i, err)
		}
	}
}

// Drain against a Redis that is down says so, as TryAcquire does.
func TestDrainRedisDownIsUnavailable(t *testing.T) {
	e := ownedEnv(t)
	c := e.client()
	s := e.sem(c, "down", 2) // the connection is up and the scripts are loaded
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // connection reset or EOF first, then refused
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		_, _, err := s.Drain(ctx)
		cancel()
		if !errors.Is(err, semaphore.ErrUnavailable) || errors.Is(err, semaphore.ErrNoPermits) {
			t.Fatalf("Drain %d with Redis down: %v; want ErrUnavailable", i, err)
		}
	}
}
