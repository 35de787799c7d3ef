package redistest

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Environment variables read by the Example functions of this module's
// packages. An example is meant to compile and run when copied from the
// documentation, so it finds Redis the way a program would: in REDIS_ADDR
// ([EnvAddr]; "127.0.0.1:6379" when unset), and the independent masters of
// the quorum example in EnvQuorumAddrs.
const (
	// EnvQuorumAddrs is a comma-separated list of host:port, one per
	// independent Redis master.
	EnvQuorumAddrs = "REDIS_QUORUM_ADDRS"
	// envExamples holds the REDIS_ADDR that ServeExamples set, so that New,
	// in this process and in test processes it starts, does not take the
	// examples' server for one the user named.
	envExamples = "REDISTEST_EXAMPLES_ADDR"
)

// ServeExamples makes sure the Example functions of the calling test binary
// reach a Redis of this run, never a server that happens to listen on
// 127.0.0.1:6379. For use in TestMain, before m.Run:
//
//	stop, err := redistest.ServeExamples(0)
//	if err != nil { ... }
//	redistest.VerifyNoLeaksAfter(m, stop)
//
// A REDIS_ADDR the user set is honoured: the examples use it, as every test
// does (see [New]). Otherwise ServeExamples starts a private server (as
// [Owned] would: redis-server from PATH, else a container) and points
// REDIS_ADDR at it; [New] keeps giving each test a private server of its own.
// With quorum > 0 it does the same for EnvQuorumAddrs with that many
// servers. stop closes what was started and restores the environment.
func ServeExamples(quorum int) (stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	var started []*Server
	var restore []func()
	stop = func() {
		for _, r := range restore {
			r()
		}
		for _, s := range started {
			_ = s.Close()
		}
	}
	serve := func(env string, n int) error {
		if os.Getenv(env) != "" {
			return nil // the user's, or set by the process that started this one
		}
		start, err := ownedStarter(ctx, newConfig(nil))
		if err != nil {
			return err
		}
		servers, err := startN(ctx, n, start)
		if err != nil {
			return err
		}
		started = append(started, servers...)
		addrs := make([]string, n)
		for i, s := range servers {
			addrs[i] = s.Addr()
		}
		value := strings.Join(addrs, ",")
		set := map[string]string{env: value}
		if env == EnvAddr {
			set[envExamples] = value
		}
		for k, v := range set {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
			restore = append(restore, func() { _ = os.Unsetenv(k) })
		}
		return nil
	}
	err = serve(EnvAddr, 1)
	if err == nil && quorum > 0 {
		err = serve(EnvQuorumAddrs, quorum)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("redistest: a Redis for the examples: %w", err)
	}
	return stop, nil
}

// userAddr is the REDIS_ADDR the user set, "" when unset or when it names
// the examples' server (see ServeExamples).
func userAddr() string {
	addr := os.Getenv(EnvAddr)
	if addr != "" && addr == os.Getenv(envExamples) {
		return ""
	}
	return addr
}
