package core

import (
	"context"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/ctxcall"
)

// bounded is the rueidis.Client the machinery sends its commands through:
// Do and DoMulti return once their context ends, even while rueidis waits for
// a connection, which ignores cancellation (a dial and its handshake run to
// the deadline of the command that started them, or to rueidis's dial
// timeout, 5s by default, and every command for that node waits for them).
// Such a command is left to finish on its own goroutine; its outcome is
// unknown to the caller, as a lost reply's.
//
// That goroutine and its wake-up cost a Lock+Unlock some 60% more client CPU,
// so they are spent only where a context may end early. A command runs
// inline when its context never ends (rueidis then bounds it), and when it
// belongs to a release its caller waits for (see Inline): that context ends
// at its deadline (the unlock timeout), which rueidis honours while the
// command is sent and read and while a dial it starts runs; what cancels it
// earlier, Close, does not wait for it. Neither runs inline once a command of
// the Client got no answer (a connection lost or closed, a deadline passed):
// rueidis may be dialling, and a command that waited for another's dial
// could outlive its deadline. From then on every command runs on its own
// goroutine until one gets an answer.
type bounded struct {
	rueidis.Client
	unsure *atomic.Bool // a command lately got no answer: see bounded
}

func newBounded(rc rueidis.Client) bounded { return bounded{Client: rc, unsure: new(atomic.Bool)} }

type inlineKey struct{}

// Inline marks ctx, a release's bounded by the unlock timeout, as one whose
// commands may run inline (see bounded).
func Inline(ctx context.Context) context.Context { return context.WithValue(ctx, inlineKey{}, true) }

func (b bounded) inline(ctx context.Context) bool {
	return !b.unsure.Load() && (ctx.Done() == nil || ctx.Value(inlineKey{}) != nil)
}

// Do is rueidis's Do, returning ctx's error once ctx ends.
func (b bounded) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	var r rueidis.RedisResult
	if b.inline(ctx) {
		r = b.Client.Do(ctx, cmd)
	} else {
		r = ctxcall.Do(ctx, b.Client.Do, cmd)
	}
	b.note(r.Error())
	return r
}

// DoMulti is rueidis's DoMulti, returning ctx's error for every command once
// ctx ends.
func (b bounded) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	var rs []rueidis.RedisResult
	if b.inline(ctx) {
		rs = b.Client.DoMulti(ctx, multi...)
	} else {
		rs = ctxcall.DoMulti(ctx, b.Client.DoMulti, multi...)
	}
	var err error
	for _, r := range rs {
		if e := r.Error(); e != nil && !answered(e) {
			err = e
			break
		}
	}
	b.note(err)
	return rs
}

// note records whether a command got an answer (err nil, or an error Redis
// sent).
func (b bounded) note(err error) {
	unsure := err != nil && !answered(err)
	if b.unsure.Load() != unsure {
		b.unsure.Store(unsure)
	}
}

func answered(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
