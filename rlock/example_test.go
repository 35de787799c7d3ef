package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// The examples run against a throwaway redis-server (or REDIS_ADDR), started on
// first use and stopped by TestMain.
var (
	exampleOnce   sync.Once
	exampleServer *redistest.Server
	exampleErr    error
)

func redisAddr() string {
	exampleOnce.Do(func() {
		exampleServer, exampleErr = redistest.StartServer(context.Background())
	})
	if exampleErr != nil {
		panic("examples need Redis: " + exampleErr.Error())
	}
	return exampleServer.Addr()
}

func stopExampleServer() {
	if exampleServer != nil {
		_ = exampleServer.Close()
	}
	stopQuorumServers()
}

func newRedis() rueidis.Client {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	if err != nil {
		panic(err)
	}
	return rc
}

func Example() {
	rc := newRedis()
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	m := c.Mutex("invoice:1001")
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// ... the critical section, doing its work with lockCtx ...

	// Any context that does not carry the hold is another owner.
	_, err = m.TryLock(ctx)
	fmt.Println("second owner locked out:", errors.Is(err, rlock.ErrLocked))

	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// second owner locked out: true
	// lock context ended by: rlock: unlocked
}

func ExampleMutex_Lock_reentrant() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	m := c.Mutex("report")

	outer, _ := m.Lock(context.Background())
	inner, _ := m.Lock(outer) // the context carries the hold: re-entry
	n, _ := m.HoldCount(inner)
	fmt.Println("hold count:", n)

	_ = m.Unlock(inner)
	locked, _ := m.IsLocked(context.Background())
	fmt.Println("locked after inner unlock:", locked)
	_ = m.Unlock(outer)
	locked, _ = m.IsLocked(context.Background())
	fmt.Println("locked after outer unlock:", locked)
	// Output:
	// hold count: 2
	// locked after inner unlock: true
	// locked after outer unlock: false
}

// A graceful shutdown: the signal (SIGINT) cancels the caller's context while
// it holds the lock. That context bounded the wait only, so the lock is still
// held and the lock context live: the critical section finishes its work
// with the lock context, and Unlock succeeds.
func ExampleMutex_Lock_shutdown() {
	rc := newRedis()
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// In a program: ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	m := c.Mutex("ledger")
	lockCtx, err := m.Lock(ctx) // ctx bounds the wait only
	if err != nil {
		panic(err)
	}
	for i, step := range []string{"debit", "credit"} {
		if i == 1 {
			stop() // the signal arrives mid-section
		}
		// Each step runs with lockCtx, which ends only if the lock is lost.
		if err := lockCtx.Err(); err != nil {
			fmt.Println("lock lost, stopping:", context.Cause(lockCtx))
			return
		}
		fmt.Printf("%s done (shutdown requested: %v)\n", step, ctx.Err() != nil)
	}
	fmt.Println("unlock:", m.Unlock(lockCtx)) // lockCtx, not ctx
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// debit done (shutdown requested: false)
	// credit done (shutdown requested: true)
	// unlock: <nil>
	// lock context ended by: rlock: unlocked
}

// fencedStore stands for a resource that checks fencing tokens: it refuses a
// write carrying a lower token than one it has already accepted.
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (s *fencedStore) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d, already saw %d", token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

func ExampleMutex_Token() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	m := c.Mutex("fenced")
	store := &fencedStore{}
	ctx := context.Background()

	// A first holder is paused past its short lease...
	first, _ := m.Lock(ctx, rlock.WithLease(50*time.Millisecond))
	firstToken, _ := m.Token(first)
	<-first.Done()
	fmt.Println("first holder:", context.Cause(first))

	// ...and a second holder gets the lock with a higher token.
	second, _ := m.Lock(ctx)
	secondToken, _ := m.Token(second)
	fmt.Println("second write:", store.Write(secondToken, "from second"))

	// When the first holder wakes up, its write is refused.
	fmt.Println("first write refused:", store.Write(firstToken, "from first") != nil)
	fmt.Println("first unlock:", errors.Is(m.Unlock(first), rlock.ErrNotHeld))
	_ = m.Unlock(second)
	// Output:
	// first holder: rlock: lease lost
	// second write: <nil>
	// first write refused: true
	// first unlock: true
}

func ExampleMutex_TryLock() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	m := c.Mutex("nightly-job")

	lockCtx, err := m.TryLock(context.Background(), rlock.WithLease(time.Minute))
	if errors.Is(err, rlock.ErrLocked) {
		fmt.Println("another worker runs the job")
		return
	}
	defer m.Unlock(lockCtx)
	fmt.Println("running the job")
	// Output:
	// running the job
}

func ExampleWithWaitTimeout() {
	rc := newRedis()
	defer rc.Close()
	c, _ := rlock.New(rc, rlock.WithKeyPrefix("example"))
	defer c.Close()
	m := c.Mutex("busy")
	ctx := context.Background()

	holder, _ := m.Lock(ctx)
	defer m.Unlock(holder)

	_, err := m.Lock(ctx, rlock.WithWaitTimeout(100*time.Millisecond))
	fmt.Println("gave up waiting:", errors.Is(err, rlock.ErrLocked), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// gave up waiting: true true
}
