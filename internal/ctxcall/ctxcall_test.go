package ctxcall

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// A call that does not return (rueidis dialling a node that stopped
// answering) is given up when ctx ends; one that returns first is returned.
func TestGivesUpWhenCtxEnds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	stuck := func(context.Context, rueidis.Completed) rueidis.RedisResult {
		<-release
		return rueidis.NewErrorResult(errors.New("late"))
	}
	stuckMulti := func(_ context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
		<-release
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := Do(ctx, stuck, rueidis.Completed{}).Error(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want the deadline", err)
	}
	res := DoMulti(ctx, stuckMulti, rueidis.Completed{}, rueidis.Completed{})
	if len(res) != 2 || !errors.Is(res[0].Error(), context.DeadlineExceeded) || !errors.Is(res[1].Error(), context.DeadlineExceeded) {
		t.Fatalf("DoMulti = %v, want the deadline twice", res)
	}

	quick := func(context.Context, rueidis.Completed) rueidis.RedisResult {
		return rueidis.NewErrorResult(errors.New("answered"))
	}
	live, stop := context.WithCancel(context.Background())
	defer stop()
	for _, c := range []context.Context{live, context.Background()} {
		if err := Do(c, quick, rueidis.Completed{}).Error(); err == nil || err.Error() != "answered" {
			t.Fatalf("Do = %v, want the call's own result", err)
		}
	}
}
