package core

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/ctxcall"
)

// bounded is the rueidis.Client the machinery sends its commands through:
// Do and DoMulti return once their context ends, even while rueidis waits for
// a connection, which ignores cancellation (a dial and its handshake run to
// rueidis's dial timeout, 5s by default, and every command for that node
// waits for them). The command is left to finish on its own goroutine, bounded
// by that timeout; its outcome is unknown to the caller, as a lost reply's.
type bounded struct {
	rueidis.Client
}

// Do is rueidis's Do, returning ctx's error once ctx ends.
func (b bounded) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return ctxcall.Do(ctx, b.Client.Do, cmd)
}

// DoMulti is rueidis's DoMulti, returning ctx's error for every command once
// ctx ends.
func (b bounded) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	return ctxcall.DoMulti(ctx, b.Client.DoMulti, multi...)
}
