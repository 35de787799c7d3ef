package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

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
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	m := c.Mutex("fenced")
	store := &fencedStore{}
	ctx := context.Background()

	// A first holder is paused past its short lease...
	first, err := m.Lock(ctx, rlock.WithLease(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	firstToken, _ := m.Token(first)
	<-first.Done()
	fmt.Println("first holder's lease lost:", errors.Is(context.Cause(first), rlock.ErrLeaseLost))

	// ...and a second holder gets the lock with a higher token.
	second, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	secondToken, _ := m.Token(second)
	fmt.Println("second write:", store.Write(secondToken, "from second"))

	// When the first holder wakes up, its write is refused.
	fmt.Println("first write refused:", store.Write(firstToken, "from first") != nil)
	fmt.Println("first unlock:", errors.Is(m.Unlock(first), rlock.ErrNotHeld))
	_ = m.Unlock(second)
	// Output:
	// first holder's lease lost: true
	// second write: <nil>
	// first write refused: true
	// first unlock: true
}
