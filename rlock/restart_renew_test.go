package rlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// aofArgs make a restarted server keep every key it acknowledged.
var aofArgs = redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always")

// A hold whose renewals fail across a quick restart of a Redis that kept
// its keys (AOF, appendfsync always) stays held: a failed renewal is retried
// within its period (rueidis fails the first command on a connection that
// the restart broke), not left to the next one, which may come too late.
func TestWatchdogHoldSurvivesQuickRestart(t *testing.T) {
	srv := redistest.Owned(t, aofArgs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &ftEnv{t: t, ctx: ctx, srv: srv, raw: redistest.Client(t, srv), prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":")}
	const watchdog = 1200 * time.Millisecond
	const name = "restart-renew"
	c := e.client(rlock.WithWatchdogTimeout(watchdog))
	m := c.Mutex(name)
	lc := ftLock(t, e.ctx, m)
	owners := e.owners(name)
	wd := watchdogOf(t, c)
	for i := range 3 {
		// Just after a renewal round, so that the next one meets the
		// broken connection.
		waitRounds(e.ctx, t, wd, wd.LastRenewRound().N, 1)
		if err := e.srv.Restart(e.ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lc.Done():
			t.Fatalf("restart %d: the hold ended: %v", i, context.Cause(lc))
		case <-time.After(2 * watchdog):
		}
		if got := e.owners(name); len(got) != 1 || got[0] != owners[0] {
			t.Fatalf("restart %d: lock owners %q, want %q", i, got, owners)
		}
	}
	mustUnlockFT(t, m, lc)
}

func (e *ftEnv) owners(name string) []string {
	e.t.Helper()
	got, err := hkeysOwners(e.raw.Do(e.ctx, e.raw.B().Hkeys().Key(e.lockKey(name)).Build()))
	if err != nil {
		e.t.Fatalf("HKEYS: %v", err)
	}
	return got
}

// ownerFields keeps the owner fields (client id ':' number) of a lock hash's
// fields, leaving out the holder's token and claim.
func ownerFields(fields []string) []string {
	var owners []string
	for _, f := range fields {
		if strings.Contains(f, ":") {
			owners = append(owners, f)
		}
	}
	return owners
}

// hkeysOwners reads the owner fields of an HKEYS reply.
func hkeysOwners(r rueidis.RedisResult) ([]string, error) {
	fields, err := r.AsStrSlice()
	return ownerFields(fields), err
}

// The same for a quorum lock, whose documented remedy for a master that
// restarts mid-hold is persistence: the restarted masters keep their part of
// the hold, renewed by their Clients' watchdogs.
func TestQuorumHoldSurvivesQuickRestart(t *testing.T) {
	srvs := redistest.NewN(t, 3, aofArgs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &qEnv{t: t, ctx: ctx, srvs: srvs, prefix: strings.TrimSuffix(redistest.KeyPrefix(t), ":")}
	for _, s := range srvs {
		e.raws = append(e.raws, redistest.Client(t, s))
	}
	const watchdog = 1200 * time.Millisecond
	q := e.quorum(rlock.QuorumOptions{ClientOptions: []rlock.Option{rlock.WithWatchdogTimeout(watchdog)}})
	m := q.Mutex("job")
	lc, err := m.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		// Two of three masters: the hold survives only if both keep it.
		for _, s := range srvs[:2] {
			if err := s.Restart(e.ctx); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(2 * watchdog)
		for time.Now().Before(deadline) {
			if n := rlock.QuorumLiveMasters(m, lc); n != len(srvs) {
				t.Fatalf("restart %d: %d of %d masters hold the lock (%v)", i, n, len(srvs), context.Cause(lc))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if got := e.held("job"); count(got) != len(srvs) {
		t.Fatalf("held on %v, want every master", got)
	}
	if err := m.Unlock(lc); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
