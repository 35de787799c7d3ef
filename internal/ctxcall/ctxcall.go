// Package ctxcall runs rueidis calls that return once their context ends.
//
// rueidis honours a context while a command waits in its pipeline, but not
// while it dials the connection the command needs (a dial and its handshake
// run to its dial timeout, 5s by default, and every command for that node
// waits for them). Do and DoMulti leave such a call on a goroutine of its own
// and return ctx's error when ctx ends first; the call's outcome is then
// unknown to the caller, as a lost reply's. A context that can never end
// costs nothing: the call runs inline.
package ctxcall

import (
	"context"

	"github.com/redis/rueidis"
)

// Do is do(ctx, cmd), returning ctx's error once ctx ends.
func Do(ctx context.Context, do func(context.Context, rueidis.Completed) rueidis.RedisResult, cmd rueidis.Completed) rueidis.RedisResult {
	if ctx.Done() == nil {
		return do(ctx, cmd)
	}
	res := make(chan rueidis.RedisResult, 1)
	go func() { res <- do(ctx, cmd) }()
	select {
	case r := <-res:
		return r
	case <-ctx.Done():
		return rueidis.NewErrorResult(ctx.Err())
	}
}

// DoMulti is doMulti(ctx, multi...), returning ctx's error for every command
// once ctx ends.
func DoMulti(ctx context.Context, doMulti func(context.Context, ...rueidis.Completed) []rueidis.RedisResult, multi ...rueidis.Completed) []rueidis.RedisResult {
	if ctx.Done() == nil {
		return doMulti(ctx, multi...)
	}
	res := make(chan []rueidis.RedisResult, 1)
	go func() { res <- doMulti(ctx, multi...) }()
	select {
	case r := <-res:
		return r
	case <-ctx.Done():
		out := make([]rueidis.RedisResult, len(multi))
		for i := range out {
			out[i] = rueidis.NewErrorResult(ctx.Err())
		}
		return out
	}
}
