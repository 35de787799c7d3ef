package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Do sends one command on a short-lived client and returns the reply. A
// Redis error reply is returned as the error (a *rueidis.RedisError). If
// ctx has a deadline it also bounds connecting, so Do on a paused server
// gives up in time.
func (s *Server) Do(ctx context.Context, args ...string) (rueidis.RedisMessage, error) {
	if len(args) == 0 {
		return rueidis.RedisMessage{}, errors.New("redistest: Do needs a command")
	}
	c, err := s.Client(func(o *rueidis.ClientOption) {
		o.DisableCache = true
		o.DisableRetry = true
		o.ClientSetInfo = rueidis.DisableClientSetInfo
		if d, ok := ctx.Deadline(); ok {
			left := max(time.Until(d), time.Millisecond)
			o.Dialer.Timeout = left
			o.ConnWriteTimeout = left
		}
	})
	if err != nil {
		return rueidis.RedisMessage{}, err
	}
	defer c.Close()
	cmd := c.B().Arbitrary(args[0]).Args(args[1:]...).Build()
	return c.Do(ctx, cmd).ToMessage()
}

// CommandStats returns INFO commandstats as calls per command. Names are
// lower-case as Redis reports them: "get", "evalsha", "publish", and
// "parent|sub" for subcommands ("client|kill", "config|get"). The commands
// sent by Do and the client handshake are counted too ("hello", "info").
// Reset with Do(ctx, "CONFIG", "RESETSTAT").
func (s *Server) CommandStats(ctx context.Context) (map[string]int64, error) {
	msg, err := s.Do(ctx, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	text, err := msg.ToString()
	if err != nil {
		return nil, fmt.Errorf("redistest: INFO commandstats: %w", err)
	}
	return parseCommandStats(text)
}

// CPU returns the CPU time the server has used, used_cpu_user plus
// used_cpu_sys of INFO cpu (microsecond resolution). On a shared
// ($REDIS_ADDR) server it counts every client's work.
func (s *Server) CPU(ctx context.Context) (time.Duration, error) {
	msg, err := s.Do(ctx, "INFO", "cpu")
	if err != nil {
		return 0, err
	}
	text, err := msg.ToString()
	if err != nil {
		return 0, fmt.Errorf("redistest: INFO cpu: %w", err)
	}
	var total float64
	for line := range strings.Lines(text) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("redistest: INFO cpu line %q: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// CommandsPer runs op n times and returns the commands Redis ran per run,
// those run inside scripts included, with the connection set-up of clients
// and INFO left out ("hello", "ping", "client|...", "info"), and the counts
// after the runs (see CommandStats). Only op may use the server meanwhile.
func (s *Server) CommandsPer(ctx context.Context, n int, op func()) (float64, map[string]int64, error) {
	before, err := s.CommandStats(ctx)
	if err != nil {
		return 0, nil, err
	}
	for range n {
		op()
	}
	after, err := s.CommandStats(ctx)
	if err != nil {
		return 0, nil, err
	}
	var calls int64
	for cmd, c := range after {
		if cmd != "info" && cmd != "hello" && cmd != "ping" && !strings.HasPrefix(cmd, "client|") {
			calls += c - before[cmd]
		}
	}
	return float64(calls) / float64(n), after, nil
}

// parseCommandStats parses lines such as
// "cmdstat_get:calls=2,usec=5,usec_per_call=2.50,rejected_calls=0,failed_calls=0".
func parseCommandStats(text string) (map[string]int64, error) {
	stats := map[string]int64{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))
		for field := range strings.SplitSeq(fields, ",") {
			v, ok := strings.CutPrefix(field, "calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redistest: commandstats line %q: %w", line, err)
			}
			stats[name] = n
		}
	}
	return stats, nil
}

// NumSub returns PUBSUB NUMSUB: the number of subscribers per channel
// (pattern subscriptions are not counted). Channels without subscribers map
// to 0.
func (s *Server) NumSub(ctx context.Context, channels ...string) (map[string]int64, error) {
	msg, err := s.Do(ctx, append([]string{"PUBSUB", "NUMSUB"}, channels...)...)
	if err != nil {
		return nil, err
	}
	counts, err := msg.AsIntMap()
	if err != nil {
		return nil, fmt.Errorf("redistest: PUBSUB NUMSUB: %w", err)
	}
	return counts, nil
}

// Subscribers returns the subscribers of every channel matching the glob
// pattern (PUBSUB CHANNELS, then NUMSUB), summed.
func (s *Server) Subscribers(ctx context.Context, pattern string) (int64, error) {
	msg, err := s.Do(ctx, "PUBSUB", "CHANNELS", pattern)
	if err != nil {
		return 0, err
	}
	channels, err := msg.AsStrSlice()
	if err != nil || len(channels) == 0 {
		return 0, err
	}
	counts, err := s.NumSub(ctx, channels...)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		n += c
	}
	return n, nil
}

// KillClients runs CLIENT KILL TYPE typ ("normal", "pubsub", "master" or
// "replica") and returns how many connections were closed. The connection
// sending the command is spared. A connection counts as "pubsub" while it
// has subscriptions, in RESP3 as in RESP2. Beware that rueidis in RESP3 mode
// (its default) subscribes on its shared command connection, so killing
// "pubsub" clients drops that connection too; rueidis then reconnects and
// resubscribes by itself, and Client.Receive does not return.
func (s *Server) KillClients(ctx context.Context, typ string) (int64, error) {
	msg, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", typ)
	if err != nil {
		return 0, err
	}
	n, err := msg.AsInt64()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLIENT KILL TYPE %s: %w", typ, err)
	}
	return n, nil
}

// IsScript reports whether args, a command as sent, calls a Lua script: the
// module sends its scripts as EVALSHA sha, EVAL source or FCALL function,
// each followed by numkeys, the keys and the arguments.
func IsScript(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch strings.ToUpper(args[0]) {
	case "EVALSHA", "EVAL", "FCALL":
		return true
	}
	return false
}

// ScriptCalls is how many script calls stats (see CommandStats) counts, by
// EVALSHA, EVAL and FCALL.
func ScriptCalls(stats map[string]int64) int64 {
	return stats["evalsha"] + stats["eval"] + stats["fcall"]
}
