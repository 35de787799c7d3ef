package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Sentinel settings of a SentinelGroup: short, so that a failover takes a
// few seconds rather than the production defaults' minute.
const (
	// SentinelDownAfter is down-after-milliseconds: how long a master must
	// not answer before a Sentinel thinks it down.
	SentinelDownAfter = time.Second
	// SentinelFailoverTimeout is failover-timeout; it also spaces two
	// failovers of the same master (twice this).
	SentinelFailoverTimeout = 3 * time.Second
	// sentinelQuorum Sentinels must agree that the master is down.
	sentinelQuorum = 2
	// sentinelCount Sentinels watch a group.
	sentinelCount = 3
	// pollEvery spaces the polls of the waits below (polling with a
	// deadline, not synchronisation).
	pollEvery = 50 * time.Millisecond
	// askTimeout bounds one question to one server while polling.
	askTimeout = time.Second
)

// SentinelGroup is a master, one replica of it and three Sentinels
// monitoring them under Name, all processes this process owns on loopback
// ports. Which of Servers is the master changes with failovers: ask
// [SentinelGroup.MasterAddr]. Close it (or use [NewSentinelGroup]).
type SentinelGroup struct {
	Name      string    // the master set name, for rueidis.SentinelOption.MasterSet
	Servers   []*Server // the data servers: [0] the first master, [1] its replica
	Sentinels []*Server
}

// StartSentinelGroup starts a master, waits for a replica (--replicaof) to be
// in sync with it, then starts three Sentinels ("redis-server <conf>
// --sentinel", each with its own writable configuration file) monitoring it
// with a quorum of two, and returns once every Sentinel knows the replica (so
// that a failover can pick it). opts apply to the master and the replica
// (WithDebugCommand, say). Docker is never used: the redis-server binary must
// be on PATH.
func StartSentinelGroup(ctx context.Context, opts ...Option) (g *SentinelGroup, err error) {
	g = &SentinelGroup{Name: "rlock-test"}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
			g = nil
		}
	}()
	// Full syncs at once (the default waits 5s for more replicas to come).
	cfg := newConfig(append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...))
	master, err := startProcess(ctx, cfg)
	if err != nil {
		return nil, err
	}
	g.Servers = append(g.Servers, master)
	host, port := splitAddr(master.Addr())
	rcfg := cfg
	rcfg.args = append(append([]string(nil), cfg.args...), "--replicaof", host, port)
	replica, err := startProcess(ctx, rcfg)
	if err != nil {
		return nil, err
	}
	g.Servers = append(g.Servers, replica)
	if err := WaitReplicas(ctx, master, 1); err != nil {
		return nil, err
	}
	scfg := newConfig(nil)
	scfg.sentinelConf = fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		g.Name, host, port, sentinelQuorum, SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
	g.Sentinels, err = startN(ctx, sentinelCount, func(ctx context.Context) (*Server, error) {
		return startProcess(ctx, scfg)
	})
	if err != nil {
		return nil, err
	}
	err = pollFor(ctx, "every Sentinel to know the replica", func(ctx context.Context) (bool, error) {
		for _, s := range g.Sentinels {
			if n, err := g.knownReplicas(ctx, s); err != nil || n < 1 {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// NewSentinelGroup is StartSentinelGroup for a test: it fails the test when
// the group cannot be started, and closes the group at cleanup.
func NewSentinelGroup(tb testing.TB, opts ...Option) *SentinelGroup {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	g, err := StartSentinelGroup(ctx, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return g
}

// SentinelAddrs returns the Sentinels' addresses, for
// rueidis.ClientOption.InitAddress.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new rueidis client that finds the master through the
// Sentinels and follows failovers; the caller closes it. opts may change any
// field of the option.
func (g *SentinelGroup) Client(opts ...func(*rueidis.ClientOption)) (rueidis.Client, error) {
	o := rueidis.ClientOption{
		InitAddress: g.SentinelAddrs(),
		Sentinel:    rueidis.SentinelOption{MasterSet: g.Name},
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redistest: sentinel client for %s: %w", g.Name, err)
	}
	return c, nil
}

// SentinelClient is [SentinelGroup.Client] for a test: closed at cleanup.
func SentinelClient(tb testing.TB, g *SentinelGroup, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	c, err := g.Client(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Server returns the data server listening on addr, or nil.
func (g *SentinelGroup) Server(addr string) *Server {
	for _, s := range g.Servers {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// MasterAddr returns the master address that a majority of the Sentinels
// report (SENTINEL GET-MASTER-ADDR-BY-NAME). Sentinels that do not answer
// count against it.
func (g *SentinelGroup) MasterAddr(ctx context.Context) (string, error) {
	votes := map[string]int{}
	var errs []error
	for _, s := range g.Sentinels {
		addr, err := g.masterOf(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		votes[addr]++
		if votes[addr] > len(g.Sentinels)/2 {
			return addr, nil
		}
	}
	return "", fmt.Errorf("redistest: no majority of Sentinels agrees on the master of %s (%v): %w", g.Name, votes, errors.Join(errs...))
}

// Master returns the data server a majority of the Sentinels report as the
// master.
func (g *SentinelGroup) Master(ctx context.Context) (*Server, error) {
	addr, err := g.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	if s := g.Server(addr); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("redistest: the Sentinels report master %s, which is not a server of the group", addr)
}

// Failover runs SENTINEL FAILOVER (retried while a Sentinel answers that no
// replica is good enough yet, or that a failover is in progress) and waits
// until every Sentinel reports the new master and it answers as one. It
// returns the new master. The Sentinels make the old master its replica only
// when they next look at it (INFO every 10s): a test that needs a replica
// sooner can send REPLICAOF itself, as they would, and then WaitReplicas.
func (g *SentinelGroup) Failover(ctx context.Context) (*Server, error) {
	old, err := g.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	err = pollFor(ctx, "SENTINEL FAILOVER to be accepted", func(ctx context.Context) (bool, error) {
		_, err := g.Sentinels[0].Do(ctx, "SENTINEL", "FAILOVER", g.Name)
		if err == nil {
			return true, nil
		}
		if re, ok := rueidis.IsRedisErr(err); ok && (strings.HasPrefix(re.Error(), "NOGOODSLAVE") || strings.HasPrefix(re.Error(), "INPROG")) {
			return false, nil
		}
		return false, err
	})
	if err != nil {
		return nil, err
	}
	return g.WaitNewMaster(ctx, old)
}

// KillMaster kills the current master (SIGKILL, see Server.Kill) once the
// Sentinels know each other (they must, to agree on the failover), and waits
// for the failover: until every running Sentinel reports the new master and
// it answers as one. It returns the old master (killed; Restart brings it back
// as an empty server, which the Sentinels turn into a replica) and the new.
func (g *SentinelGroup) KillMaster(ctx context.Context) (old, promoted *Server, err error) {
	err = pollFor(ctx, "the Sentinels to know each other", func(ctx context.Context) (bool, error) {
		for _, s := range g.Sentinels {
			msg, err := s.Do(ctx, "SENTINEL", "SENTINELS", g.Name)
			if err != nil {
				return false, err
			}
			peers, err := msg.ToArray()
			if err != nil || len(peers) < len(g.Sentinels)-1 {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if old, err = g.Master(ctx); err != nil {
		return nil, nil, err
	}
	if err := old.Kill(); err != nil {
		return nil, nil, err
	}
	promoted, err = g.WaitNewMaster(ctx, old.Addr())
	return old, promoted, err
}

// WaitNewMaster waits until every running Sentinel reports a master other
// than old and that server answers ROLE as a master, and returns it.
func (g *SentinelGroup) WaitNewMaster(ctx context.Context, old string) (*Server, error) {
	var promoted *Server
	err := pollFor(ctx, "the Sentinels to report a new master", func(ctx context.Context) (bool, error) {
		addr := ""
		for _, s := range g.Sentinels {
			if s.isKilled() {
				continue
			}
			a, err := g.masterOf(ctx, s)
			if err != nil || a == old || (addr != "" && a != addr) {
				return false, err
			}
			addr = a
		}
		if promoted = g.Server(addr); promoted == nil {
			return false, fmt.Errorf("the Sentinels report master %s, which is not a server of the group", addr)
		}
		role, err := promoted.Do(ctx, "ROLE")
		if err != nil {
			return false, nil // just promoted: may still be busy
		}
		vals, err := role.ToArray()
		if err != nil || len(vals) == 0 {
			return false, err
		}
		r, _ := vals[0].ToString()
		return r == "master", nil
	})
	return promoted, err
}

// WaitReplicas waits until master reports at least n replicas online (INFO
// replication).
func WaitReplicas(ctx context.Context, master *Server, n int) error {
	return pollFor(ctx, fmt.Sprintf("%s to have %d replica(s) online", master.Addr(), n), func(ctx context.Context) (bool, error) {
		msg, err := master.Do(ctx, "INFO", "replication")
		if err != nil {
			return false, nil // restarting, or busy
		}
		text, err := msg.ToString()
		if err != nil {
			return false, err
		}
		online := 0
		for line := range strings.Lines(text) {
			if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
				online++
			}
		}
		return online >= n, nil
	})
}

// Close closes every server of the group; it is idempotent.
func (g *SentinelGroup) Close() error {
	var errs []error
	for _, s := range append(append([]*Server(nil), g.Sentinels...), g.Servers...) {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

func (g *SentinelGroup) masterOf(ctx context.Context, s *Server) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	msg, err := s.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name)
	if err != nil {
		return "", err
	}
	hp, err := msg.AsStrSlice()
	if err != nil || len(hp) != 2 {
		return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME from %s: %v %w", s.Addr(), hp, err)
	}
	return hp[0] + ":" + hp[1], nil
}

// knownReplicas counts the replicas Sentinel s knows in a usable state (not
// down or disconnected).
func (g *SentinelGroup) knownReplicas(ctx context.Context, s *Server) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	msg, err := s.Do(ctx, "SENTINEL", "REPLICAS", g.Name)
	if err != nil {
		return 0, err
	}
	list, err := msg.ToArray()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range list {
		m, err := r.AsStrMap()
		if err != nil {
			return 0, err
		}
		flags := m["flags"]
		if !strings.Contains(flags, "down") && !strings.Contains(flags, "disconnected") && m["master-link-status"] == "ok" {
			n++
		}
	}
	return n, nil
}

// isKilled reports whether s was killed (and not restarted).
func (s *Server) isKilled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateKilled
}

// pollFor runs check every pollEvery until it reports done, fails, or ctx ends;
// what names what is waited for, in the error.
func pollFor(ctx context.Context, what string, check func(ctx context.Context) (bool, error)) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last error
	for {
		done, err := check(ctx)
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}
