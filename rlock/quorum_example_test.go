package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

func ExampleNewQuorum() {
	// One rueidis client per independent Redis master (not replicas of one
	// another), here from REDIS_QUORUM_ADDRS.
	addrs := os.Getenv("REDIS_QUORUM_ADDRS")
	if addrs == "" {
		addrs = "127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381"
	}
	var masters []rueidis.Client
	for _, addr := range strings.Split(addrs, ",") {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
		if err != nil {
			panic(err)
		}
		defer rc.Close()
		masters = append(masters, rc)
	}
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
