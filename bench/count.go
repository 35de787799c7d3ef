package main

import (
	"context"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/relockio/relock/internal/measure"
)

// countingHook counts the commands of a go-redis client. Its connection
// set-up (HELLO, CLIENT SETINFO) does not pass through hooks.
type countingHook struct{ n *measure.Requests }

func (h countingHook) DialHook(next goredislib.DialHook) goredislib.DialHook { return next }

func (h countingHook) ProcessHook(next goredislib.ProcessHook) goredislib.ProcessHook {
	return func(ctx context.Context, cmd goredislib.Cmder) error {
		h.n.Add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h countingHook) ProcessPipelineHook(next goredislib.ProcessPipelineHook) goredislib.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredislib.Cmder) error {
		for _, cmd := range cmds {
			h.n.Add(cmd.Name())
		}
		return next(ctx, cmds)
	}
}
