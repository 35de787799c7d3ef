package main

import (
	"context"
	"crypto/rand"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
)

// spinClient is the classic polling lock (measure.SpinLocker): SET NX PX, and
// on failure sleep 1ms doubling to 128ms and try again.
type spinClient struct {
	rc     rueidis.Client
	l      *measure.SpinLocker
	prefix string
}

func openSpin(_ context.Context, env OpenEnv) (LockClient, error) {
	rc, err := newRueidis(env)
	if err != nil {
		return nil, err
	}
	return &spinClient{rc: rc, l: measure.NewSpinLocker(rc, rand.Text()[:12], leaseTTL), prefix: env.Prefix}, nil
}

func (s *spinClient) Lock(ctx context.Context, name string) (Held, error) {
	unlock, err := s.l.Lock(ctx, s.prefix+":"+name)
	if err != nil {
		return nil, err
	}
	return heldFunc(unlock), nil
}

func (s *spinClient) Close() error { s.rc.Close(); return nil }
