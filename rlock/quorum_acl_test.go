package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// A quorum lock whose masters refuse the Redis user a command (an ACL
// changed after New) fails at once with an error matching ErrPermission
// and ErrNoQuorum, not ErrUnavailable: a refusal is an answer, and no round
// can win until the ACL changes. (Lock retried until its context ended, and
// both calls reported masters that could not be reached.)
func TestQuorumRefusedIsPermission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvs := redistest.NewN(t, 3)
	rules := strings.ReplaceAll(aclRules, "rlock:{*", "rlock-quorum:{*")
	var clients []rueidis.Client
	for _, s := range srvs {
		setACLUser(t, ctx, s, rules)
		clients = append(clients, redistest.Client(t, s, userOption))
	}
	q, err := rlock.NewQuorumWith(rlock.QuorumOptions{}, clients...)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m := q.Mutex("refused")
	lc, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lc); err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		if _, err := s.Do(ctx, "ACL", "SETUSER", aclUserName, "-hset"); err != nil {
			t.Fatal(err)
		}
	}
	check := func(call string, err error) {
		t.Helper()
		if !errors.Is(err, rlock.ErrPermission) || !errors.Is(err, rlock.ErrNoQuorum) || errors.Is(err, rlock.ErrUnavailable) {
			t.Errorf("%s: %v: want ErrPermission and ErrNoQuorum, not ErrUnavailable", call, err)
		}
	}
	_, err = m.TryLock(ctx)
	check("TryLock", err)
	lockCtx, cancelLock := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLock()
	start := time.Now()
	_, err = m.Lock(lockCtx)
	check("Lock", err)
	if took := time.Since(start); lockCtx.Err() != nil {
		t.Errorf("Lock retried a refusal for %v, until its context ended", took)
	}
}
