package redistest

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Gate is a rueidis client that holds back every script call sent in a
// DoMulti (a Client's watchdog renewals and claim extensions) whose keys
// contain its key, until Open is called: a test observes what Redis holds
// before the renewal runs. Other commands pass at once.
type Gate struct {
	rueidis.Client
	key     string
	once    sync.Once
	opened  sync.Once
	reached chan struct{}
	open    chan struct{}
}

// NewGate wraps rc, holding back the script calls on a key that contains key.
func NewGate(rc rueidis.Client, key string) *Gate {
	return &Gate{Client: rc, key: key, reached: make(chan struct{}), open: make(chan struct{})}
}

// Reached is closed when the first call held back arrives.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Open lets every call held back, and every later one, through.
func (g *Gate) Open() { g.opened.Do(func() { close(g.open) }) }

// DoMulti sends cmds once the gate is open when one of them is a script call
// on the gate's key; it fails them with the context's error when ctx ends
// first.
func (g *Gate) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range cmds {
		args := cmd.Commands()
		if len(args) > 3 && IsScript(args) && strings.Contains(strings.Join(args[3:], " "), g.key) {
			g.once.Do(func() { close(g.reached) })
			select {
			case <-g.open:
			case <-ctx.Done():
				rs := make([]rueidis.RedisResult, len(cmds))
				for i := range rs {
					rs[i] = rueidis.NewErrorResult(ctx.Err())
				}
				return rs
			}
			break
		}
	}
	return g.Client.DoMulti(ctx, cmds...)
}
