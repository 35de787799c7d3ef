package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// requests counts the Redis commands one contender's clients send, by command
// name. It is what the clients put on Redis, as opposed to INFO commandstats,
// which also counts every command a Lua script runs inside Redis.
type requests struct {
	total  atomic.Int64
	byName sync.Map // upper-case command name -> *atomic.Int64
}

// add counts one command about to be sent. It must be called before the
// command is handed to rueidis, which recycles it once sent.
func (r *requests) add(cmd []string) {
	r.total.Add(1)
	name := "?"
	if len(cmd) > 0 {
		name = strings.ToUpper(cmd[0])
	}
	n, ok := r.byName.Load(name)
	if !ok {
		n, _ = r.byName.LoadOrStore(name, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// snapshot returns the counts by command name so far.
func (r *requests) snapshot() map[string]int64 {
	m := map[string]int64{}
	r.byName.Range(func(k, v any) bool {
		m[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}

// countingClient is a rueidis.Client that counts every command sent through
// it. rueidis.Lua.Exec calls Do, so a script call counts once (EVALSHA, plus
// EVAL after a NOSCRIPT reply). Commands rueidis sends on its own when it
// opens a connection (HELLO, CLIENT TRACKING, PING) are not counted: they are
// not the lock's doing, and happen once per connection.
type countingClient struct {
	rueidis.Client
	n *requests
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.add(cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.add(multi[i].Commands())
	}
	return c.Client.DoMulti(ctx, multi...)
}

// DoCache counts the command only when it was not answered from the client-side
// cache: a cache hit sends nothing.
func (c *countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	name := slices.Clone(cmd.Commands()[:1])
	resp := c.Client.DoCache(ctx, cmd, ttl)
	if !resp.IsCacheHit() {
		c.n.add(name)
	}
	return resp
}

func (c *countingClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	names := make([][]string, len(multi))
	for i := range multi {
		names[i] = slices.Clone(multi[i].Cmd.Commands()[:1])
	}
	resps := c.Client.DoMultiCache(ctx, multi...)
	for i, resp := range resps {
		if !resp.IsCacheHit() {
			c.n.add(names[i])
		}
	}
	return resps
}

func (c *countingClient) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c.n.add(cmd.Commands())
	return c.Client.DoStream(ctx, cmd)
}

func (c *countingClient) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	for i := range multi {
		c.n.add(multi[i].Commands())
	}
	return c.Client.DoMultiStream(ctx, multi...)
}

// Receive counts its SUBSCRIBE command.
func (c *countingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.add(subscribe.Commands())
	return c.Client.Receive(ctx, subscribe, fn)
}

func (c *countingClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return c.Client.Dedicated(func(dc rueidis.DedicatedClient) error {
		return fn(&countingDedicated{DedicatedClient: dc, n: c.n})
	})
}

// Dedicate wraps the dedicated connection, so that the SUBSCRIBE and
// UNSUBSCRIBE commands of pub/sub waiting count too.
func (c *countingClient) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return &countingDedicated{DedicatedClient: dc, n: c.n}, cancel
}

func (c *countingClient) Nodes() map[string]rueidis.Client {
	nodes := map[string]rueidis.Client{}
	for addr, node := range c.Client.Nodes() {
		nodes[addr] = &countingClient{Client: node, n: c.n}
	}
	return nodes
}

// countingDedicated is a rueidis.DedicatedClient that counts every command
// sent through it, into its parent client's requests.
type countingDedicated struct {
	rueidis.DedicatedClient
	n *requests
}

func (c *countingDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.add(cmd.Commands())
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c *countingDedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.add(multi[i].Commands())
	}
	return c.DedicatedClient.DoMulti(ctx, multi...)
}

func (c *countingDedicated) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.add(subscribe.Commands())
	return c.DedicatedClient.Receive(ctx, subscribe, fn)
}
