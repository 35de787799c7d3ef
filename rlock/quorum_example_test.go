package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// The quorum example runs against three throwaway redis-servers, started on
// first use and stopped by TestMain (see stopExampleServer).
var (
	quorumOnce    sync.Once
	quorumServers []*redistest.Server
	quorumErr     error
)

func quorumMasters() []rueidis.Client {
	quorumOnce.Do(func() {
		quorumServers, quorumErr = redistest.StartServers(context.Background(), 3)
	})
	if quorumErr != nil {
		panic("the quorum example needs three Redis servers: " + quorumErr.Error())
	}
	clients := make([]rueidis.Client, len(quorumServers))
	for i, s := range quorumServers {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, ForceSingleClient: true})
		if err != nil {
			panic(err)
		}
		clients[i] = rc
	}
	return clients
}

func stopQuorumServers() {
	for _, s := range quorumServers {
		_ = s.Close()
	}
}

func ExampleNewQuorum() {
	masters := quorumMasters() // one rueidis client per independent master
	defer func() {
		for _, rc := range masters {
			rc.Close()
		}
	}()
	q, err := rlock.NewQuorum(masters...)
	if err != nil {
		panic(err)
	}
	defer q.Close()
	fmt.Printf("a lock needs %d of %d masters\n", q.Majority(), q.Masters())

	ctx := context.Background()
	m := q.Mutex("nightly-report")
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// ... the critical section, within the validity of the hold ...
	v, _ := m.Validity(lockCtx)
	fmt.Println("valid for more than 29s:", v.Seconds() > 29)

	_, err = m.TryLock(ctx) // another owner
	fmt.Println("second owner locked out:", errors.Is(err, rlock.ErrLocked))

	if err := m.Unlock(lockCtx); err != nil {
		panic(err)
	}
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// a lock needs 2 of 3 masters
	// valid for more than 29s: true
	// second owner locked out: true
	// lock context ended by: rlock: unlocked
}
