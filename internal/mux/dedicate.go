package mux

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/ctxcall"
)

// dedicate is client.Dedicate given up when ctx ends first (Close): rueidis
// dials a dedicated connection without a context, so a dial to a node that
// stopped answering runs to rueidis's dial timeout (5s by default), which
// Close must not wait for. A connection dialled after ctx ended is closed.
// The returned client's commands also return once their context ends (see
// boundedDC).
func dedicate(ctx context.Context, client rueidis.Client) (rueidis.DedicatedClient, error) {
	got := make(chan rueidis.DedicatedClient)
	go func() {
		dc, _ := client.Dedicate()
		select {
		case got <- dc:
		case <-ctx.Done():
			dc.Close()
		}
	}()
	select {
	case dc := <-got:
		return boundedDC{dc}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// boundedDC is a dedicated client whose Do and DoMulti return once their
// context ends, even while rueidis dials the connection lazily (a cluster
// client's dedicated connection is dialled by its first command, and that
// dial ignores cancellation). The command is left to finish on its own
// goroutine; the caller closes the connection, which it then treats as lost.
type boundedDC struct {
	rueidis.DedicatedClient
}

func (b boundedDC) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return ctxcall.Do(ctx, b.DedicatedClient.Do, cmd)
}

func (b boundedDC) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	return ctxcall.DoMulti(ctx, b.DedicatedClient.DoMulti, multi...)
}
