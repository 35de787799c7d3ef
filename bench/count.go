package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Requests counts the commands a contender's clients send to Redis, by
// command name: what crosses the network, as opposed to INFO commandstats,
// which also counts every command a Lua script runs inside Redis. A script
// call counts once (EVALSHA, plus EVAL after a NOSCRIPT reply). Connection
// handshakes (HELLO, CLIENT SETINFO, CLIENT TRACKING) are not counted.
type Requests struct {
	mu     sync.Mutex
	byName map[string]*atomic.Int64
}

func newRequests() *Requests { return &Requests{byName: map[string]*atomic.Int64{}} }

// add counts one command. rueidis recycles a command once it is sent, so
// callers pass the name before handing the command over.
func (r *Requests) add(name string) {
	name = strings.ToUpper(name)
	r.mu.Lock()
	n := r.byName[name]
	if n == nil {
		n = new(atomic.Int64)
		r.byName[name] = n
	}
	r.mu.Unlock()
	n.Add(1)
}

func (r *Requests) addCmd(cmd []string) {
	if len(cmd) == 0 {
		r.add("?")
		return
	}
	r.add(cmd[0])
}

// Snapshot returns the counts so far.
func (r *Requests) Snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int64, len(r.byName))
	for _, k := range slices.Sorted(maps.Keys(r.byName)) {
		m[k] = r.byName[k].Load()
	}
	return m
}

// countingClient is a rueidis.Client that counts every command sent through
// it, including those of dedicated (pub/sub) connections.
type countingClient struct {
	rueidis.Client
	n *Requests
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.addCmd(cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.addCmd(multi[i].Commands())
	}
	return c.Client.DoMulti(ctx, multi...)
}

// DoCache counts the command only when the client-side cache did not answer
// it: a cache hit sends nothing.
func (c *countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	name := strings.Clone(cmd.Commands()[0])
	resp := c.Client.DoCache(ctx, cmd, ttl)
	if !resp.IsCacheHit() {
		c.n.add(name)
	}
	return resp
}

func (c *countingClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	names := make([]string, len(multi))
	for i := range multi {
		names[i] = strings.Clone(multi[i].Cmd.Commands()[0])
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
	c.n.addCmd(cmd.Commands())
	return c.Client.DoStream(ctx, cmd)
}

func (c *countingClient) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	for i := range multi {
		c.n.addCmd(multi[i].Commands())
	}
	return c.Client.DoMultiStream(ctx, multi...)
}

func (c *countingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.addCmd(subscribe.Commands())
	return c.Client.Receive(ctx, subscribe, fn)
}

func (c *countingClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return c.Client.Dedicated(func(dc rueidis.DedicatedClient) error {
		return fn(&countingDedicated{DedicatedClient: dc, n: c.n})
	})
}

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

type countingDedicated struct {
	rueidis.DedicatedClient
	n *Requests
}

func (c *countingDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.addCmd(cmd.Commands())
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c *countingDedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.addCmd(multi[i].Commands())
	}
	return c.DedicatedClient.DoMulti(ctx, multi...)
}

func (c *countingDedicated) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.addCmd(subscribe.Commands())
	return c.DedicatedClient.Receive(ctx, subscribe, fn)
}

// countingHook counts the commands of a go-redis client. Its connection
// set-up (HELLO, CLIENT SETINFO) does not pass through hooks.
type countingHook struct{ n *Requests }

func (h countingHook) DialHook(next goredislib.DialHook) goredislib.DialHook { return next }

func (h countingHook) ProcessHook(next goredislib.ProcessHook) goredislib.ProcessHook {
	return func(ctx context.Context, cmd goredislib.Cmder) error {
		h.n.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h countingHook) ProcessPipelineHook(next goredislib.ProcessPipelineHook) goredislib.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredislib.Cmder) error {
		for _, cmd := range cmds {
			h.n.add(cmd.Name())
		}
		return next(ctx, cmds)
	}
}
