package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// A transfer locks both accounts it touches, all or nothing, in one order
// whatever the order given, so that two transfers between the same accounts
// in opposite directions cannot deadlock.
func ExampleClient_MultiLock() {
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
	ctx := context.Background()

	transfer := c.MultiLock("account:7", "account:3")
	fmt.Println("members in order:", transfer.Names())
	lockCtx, err := transfer.Lock(ctx)
	if err != nil {
		panic(err)
	}
	tokens, _ := transfer.Tokens(lockCtx) // one fencing token per account
	fmt.Println("tokens:", len(tokens), tokens["account:3"] > 0, tokens["account:7"] > 0)

	// A transfer between account:1 and account:3 must wait: TryLock takes
	// account:1, finds account:3 taken, and gives account:1 back.
	_, err = c.MultiLock("account:3", "account:1").TryLock(ctx)
	fmt.Println("other transfer locked out:", errors.Is(err, rlock.ErrLocked))
	locked, _ := c.Mutex("account:1").IsLocked(ctx)
	fmt.Println("account:1 held:", locked)

	if err := transfer.Unlock(lockCtx); err != nil {
		panic(err)
	}
	fmt.Println("lock context ended by:", context.Cause(lockCtx))
	// Output:
	// members in order: [account:3 account:7]
	// tokens: 2 true true
	// other transfer locked out: true
	// account:1 held: false
	// lock context ended by: rlock: unlocked
}
