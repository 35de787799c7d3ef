package mux

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Resolved sharding modes (Multiplexer.mode).
const (
	modeUnknown int32 = iota
	modeClassic
	modeSharded
)

// Sharded reports whether the Multiplexer subscribes with SSUBSCRIBE, so
// that publishers must use SPUBLISH (see PublishCommand). Under ShardingAuto
// on a cluster client the first call asks the server its version (INFO
// server), retrying transient failures until ctx ends; the answer is kept.
// A nil ctx is refused with an error matching ErrInvalidOption, and a
// Multiplexer not made by New returns an error matching ErrClosed; the bool
// is then false.
func (m *Multiplexer) Sharded(ctx context.Context) (bool, error) {
	switch {
	case ctx == nil:
		return false, errNilContext("Sharded")
	case m.unusable():
		return false, errNotNew
	}
	if mode := m.mode.Load(); mode != modeUnknown {
		return mode == modeSharded, nil
	}
	backoff := MinReconnectBackoff
	for {
		mode, err := m.detect(ctx)
		if err == nil {
			m.mode.CompareAndSwap(modeUnknown, mode)
			return m.mode.Load() == modeSharded, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("pubsub: detect sharded pub/sub: %w (last error: %w)", ctx.Err(), err)
		case <-m.closed:
			return false, ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, m.cfg.MaxBackoff)
	}
}

// PublishCommand returns "SPUBLISH" when the Multiplexer is sharded, else
// "PUBLISH": the command (or the redis.call of a script) that reaches its
// Waiters. When the mode is not known yet it is detected within ctx; if that
// fails (Redis unreachable) "PUBLISH" is returned: a message published so may
// be missed by sharded Waiters, which is safe only where, as in this module's
// locks, messages merely wake and every wait also re-checks on a timer. With
// a nil ctx nothing is detected: the mode if known, else "PUBLISH".
func (m *Multiplexer) PublishCommand(ctx context.Context) string {
	if ctx == nil {
		if !m.unusable() && m.mode.Load() == modeSharded {
			return "SPUBLISH"
		}
		return "PUBLISH"
	}
	if sharded, _ := m.Sharded(ctx); sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// detect decides the mode once; an error means "ask again later".
func (m *Multiplexer) detect(ctx context.Context) (int32, error) {
	switch m.cfg.Sharding {
	case ShardingClassic:
		return modeClassic, nil
	case ShardingSharded:
		return modeSharded, nil
	}
	if m.client.Mode() != rueidis.ClientModeCluster {
		return modeClassic, nil
	}
	info, err := m.client.Do(ctx, m.client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		if permanent(err) {
			return modeClassic, nil // INFO denied: the safe, universal choice
		}
		return modeUnknown, err
	}
	if redisMajor(info) >= 7 {
		return modeSharded, nil
	}
	return modeClassic, nil
}

// redisMajor returns the major version in an INFO server text, 0 if absent.
func redisMajor(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			major, _, _ := strings.Cut(v, ".")
			n, _ := strconv.Atoi(major)
			return n
		}
	}
	return 0
}
