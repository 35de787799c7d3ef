package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relockio/relock/rlock"
)

// A Lock that waits behind another call of its own Client, which only
// meets connection errors, has had no answer from Redis: when its wait
// timeout ends it, the error is ErrUnavailable, not ErrLocked (it was
// "locked by another owner", with the lock free and Redis unreachable).
// Behind a call that Redis told the lock is held, it stays ErrLocked.
func TestLocalWaiterErrorFollowsItsLeader(t *testing.T) {
	e := ftNewEnv(t)
	fc := ftFaulty(t, e.srv)
	c := e.clientOn(fc)
	const name = "local-waiter-errors"
	holderView := e.client().Mutex(name)
	leaderCtx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	waitBehindLeader := func(queued int) error {
		t.Helper()
		e.eventually(ftPatience, "the leader's wait", func() bool {
			info, err := holderView.Inspect(e.ctx)
			return rlock.WaitingInClient(c, name) == 1 && err == nil && info.Queued == queued
		})
		_, err := c.Mutex(name).Lock(e.ctx, rlock.WithWaitTimeout(100*time.Millisecond))
		return err
	}

	// Redis unreachable for acquisitions: the leader retries.
	fc.set(func(script string) *ftFault {
		if script == "acquire" {
			return &ftFailCall
		}
		return nil
	})
	leader := make(chan error, 1)
	go func() { _, err := c.Mutex(name).Lock(leaderCtx); leader <- err }()
	if err := waitBehindLeader(0); errors.Is(err, rlock.ErrLocked) || !errors.Is(err, rlock.ErrUnavailable) {
		t.Errorf("behind a leader that reached no Redis: %v, want ErrUnavailable", err)
	}
	cancel()
	<-leader

	// Another Client holds the lock: the leader waits in Redis.
	fc.set(nil)
	held := ftLock(t, e.ctx, holderView)
	leaderCtx, cancel = context.WithCancel(e.ctx)
	defer cancel()
	go func() { _, err := c.Mutex(name).Lock(leaderCtx); leader <- err }()
	if err := waitBehindLeader(1); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("behind a leader queued behind another Client's hold: %v, want ErrLocked", err)
	}
	cancel()
	<-leader
	if err := holderView.Unlock(held); err != nil {
		t.Fatal(err)
	}
}
