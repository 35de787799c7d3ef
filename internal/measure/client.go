package measure

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// CountingClient wraps rc so that every command sent through it, including
// those of dedicated (pub/sub) connections and of per-node clients, is counted
// in n. Commands answered from the client-side cache send nothing and are not
// counted.
func CountingClient(rc rueidis.Client, n *Requests) rueidis.Client {
	return &countingClient{Client: rc, n: n}
}

type countingClient struct {
	rueidis.Client
	n *Requests
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.AddCmd(cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.AddCmd(multi[i].Commands())
	}
	return c.Client.DoMulti(ctx, multi...)
}

func (c *countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	name := strings.Clone(cmd.Commands()[0])
	resp := c.Client.DoCache(ctx, cmd, ttl)
	if !resp.IsCacheHit() {
		c.n.Add(name)
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
			c.n.Add(names[i])
		}
	}
	return resps
}

func (c *countingClient) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c.n.AddCmd(cmd.Commands())
	return c.Client.DoStream(ctx, cmd)
}

func (c *countingClient) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	for i := range multi {
		c.n.AddCmd(multi[i].Commands())
	}
	return c.Client.DoMultiStream(ctx, multi...)
}

func (c *countingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.AddCmd(subscribe.Commands())
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
	dc, release := c.Client.Dedicate()
	return &countingDedicated{DedicatedClient: dc, n: c.n}, release
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
	c.n.AddCmd(cmd.Commands())
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c *countingDedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		c.n.AddCmd(multi[i].Commands())
	}
	return c.DedicatedClient.DoMulti(ctx, multi...)
}

func (c *countingDedicated) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.AddCmd(subscribe.Commands())
	return c.DedicatedClient.Receive(ctx, subscribe, fn)
}
