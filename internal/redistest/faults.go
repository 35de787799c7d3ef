package redistest

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// WithDebugCommand allows the DEBUG command from loopback connections, which
// [Server.DebugSleep] needs (Redis 7 refuses it by default).
func WithDebugCommand() Option {
	return WithArgs("--enable-debug-command", "local")
}

// ClientPause runs CLIENT PAUSE for d (over a raw connection: rueidis ends a
// pause made on its connection when it closes): the server stops answering clients
// ("ALL", the default when mode is "") or only writes ("WRITE") for d, while
// accepting connections. It returns at once; the pause ends by itself.
func (s *Server) ClientPause(ctx context.Context, d time.Duration, mode string) error {
	if mode == "" {
		mode = "ALL"
	}
	ms := strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	// A raw connection: a rueidis client's pause ends when it closes.
	_, err := rawCommand(ctx, s.addr, "CLIENT", "PAUSE", ms, mode)
	if err != nil {
		return fmt.Errorf("redistest: CLIENT PAUSE %s %s: %w", ms, mode, err)
	}
	return nil
}

// DebugSleep runs DEBUG SLEEP for d: the server's event loop blocks, so it
// answers nothing (not even new connections) until the sleep ends. It returns
// when the sleep is over. The server must have been started with
// [WithDebugCommand].
func (s *Server) DebugSleep(ctx context.Context, d time.Duration) error {
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	if _, err := rawCommand(ctx, s.addr, "DEBUG", "SLEEP", secs); err != nil {
		return fmt.Errorf("redistest: DEBUG SLEEP %s: %w", secs, err)
	}
	return nil
}

// KeyState is one key as seen by [Server.Snapshot].
type KeyState struct {
	Dump      string // DUMP, hex-encoded: type, encoding and value
	HasExpiry bool   // whether the key has a TTL (its value changes, so only presence is kept)
}

// Snapshot returns every key matching the SCAN pattern match ("*" for all)
// with its serialized value, for checking that an operation left Redis
// unchanged.
func (s *Server) Snapshot(ctx context.Context, match string) (map[string]KeyState, error) {
	c, err := s.Client(func(o *rueidis.ClientOption) { o.DisableCache = true })
	if err != nil {
		return nil, err
	}
	defer c.Close()
	keys, err := scanKeys(ctx, c, match)
	if err != nil {
		return nil, err
	}
	out := make(map[string]KeyState, len(keys))
	for _, k := range keys {
		res := c.DoMulti(ctx, c.B().Dump().Key(k).Build(), c.B().Pttl().Key(k).Build())
		b, err := res[0].ToString()
		if rueidis.IsRedisNil(err) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("redistest: DUMP %q: %w", k, err)
		}
		ms, err := res[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("redistest: PTTL %q: %w", k, err)
		}
		out[k] = KeyState{Dump: hex.EncodeToString([]byte(b)), HasExpiry: ms >= 0}
	}
	return out, nil
}

// Keys lists the keys matching the SCAN pattern match, sorted.
func (s *Server) Keys(ctx context.Context, match string) ([]string, error) {
	c, err := s.Client(func(o *rueidis.ClientOption) { o.DisableCache = true })
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return scanKeys(ctx, c, match)
}

func scanKeys(ctx context.Context, c rueidis.Client, match string) ([]string, error) {
	var keys []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("redistest: SCAN: %w", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	sort.Strings(keys)
	return keys, nil
}
