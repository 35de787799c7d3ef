package rlock_test

// Claim windows on the RWMutex (WithClaimWindow): a writer or a batch of
// readers granted the lock while queued holds it for the claim window until
// its Client extends the grant, so that a grantee that cannot take the lock up
// (its connection stalled, PUBLISH still counting it) holds the queue up for
// seconds, not a lease.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/faultproxy"
	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

func rwWord(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

// rwLockAsync takes the write lock (write) or the read lock of rw in a
// goroutine.
func rwLockAsync(ctx context.Context, rw *rlock.RWMutex, write bool, opts ...rlock.LockOption) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		lock := rw.RLock
		if write {
			lock = rw.Lock
		}
		lc, err := lock(ctx, opts...)
		ch <- lockResult{lc, err, time.Now()}
	}()
	return ch
}

// rwTTL is how long the write hold of the RWMutex name (write), or the read
// hold that lasts longest, has left in Redis.
func (e *ftEnv) rwTTL(name string, write bool) time.Duration {
	e.t.Helper()
	if write {
		ms, err := e.raw.Do(e.ctx, e.raw.B().Pttl().Key(e.rwKey(name, "")).Build()).AsInt64()
		if err != nil {
			e.t.Fatal(err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	last, err := e.raw.Do(e.ctx, e.raw.B().Zrange().Key(e.rwKey(name, ":r")).Min("-1").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(last) == 0 {
		return 0
	}
	now, err := e.raw.Do(e.ctx, e.raw.B().Time().Build()).AsStrSlice()
	if err != nil || len(now) != 2 {
		e.t.Fatalf("TIME: %q, %v", now, err)
	}
	sec, _ := strconv.ParseInt(now[0], 10, 64)
	usec, _ := strconv.ParseInt(now[1], 10, 64)
	return time.Duration(int64(last[0].Score)-(sec*1000+usec/1000)) * time.Millisecond
}

// stuckClient is a Client whose connections all go through a proxy that the
// test can stall: nothing moves, nothing closes, so PUBLISH still counts its
// subscriptions as receivers.
func (e *ftEnv) stuckClient() (*faultproxy.Proxy, *rlock.Client) {
	e.t.Helper()
	p, err := faultproxy.Start(e.srv.Addr())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p, e.clientOn(redistest.Client(e.t, e.srv, func(o *rueidis.ClientOption) { o.InitAddress = []string{p.Addr()} }))
}

// A writer or reader granted the lock while queued takes it from the grant
// message (Redis holds it for the claim window only), keeps it past the
// window once its Client extended it to the lease, with the token the grant
// carried: a writer's own, a reader the last writer's.
func TestRWClaimExtended(t *testing.T) {
	for _, write := range []bool{true, false} {
		t.Run(rwWord(write), func(t *testing.T) {
			e := ftNewEnv(t)
			const name = "rw-claim-extended"
			holder, waiter := e.client(), e.client()
			held := rwLock(t, e.ctx, holder.RWMutex(name), true)
			heldToken, _ := holder.RWMutex(name).Token(held)
			ch := rwLockAsync(e.ctx, waiter.RWMutex(name), write)
			e.rwQueuedIs(name, 1)
			rwUnlock(t, holder.RWMutex(name), held, true)
			r := receiveLock(t, ch, ftPatience, "the waiter")
			rw := waiter.RWMutex(name)
			if ttl := e.rwTTL(name, write); ttl <= 0 || ttl > rlock.DefaultClaimWindow {
				t.Fatalf("TTL just after the grant = %v; want at most the claim window (the grant taken from its message)", ttl)
			}
			token, err := rw.Token(r.lc)
			switch {
			case err != nil:
				t.Fatal(err)
			case write && token <= heldToken:
				t.Errorf("the granted writer's token %d is not above the last writer's %d", token, heldToken)
			case !write && token != heldToken:
				t.Errorf("the granted reader's token %d is not the last writer's %d", token, heldToken)
			}
			e.eventually(ftPatience, "the grant extended past the claim window", func() bool {
				return e.rwTTL(name, write) > rlock.DefaultClaimWindow
			})
			select {
			case <-r.lc.Done():
				t.Fatalf("the hold ended: %v", context.Cause(r.lc))
			case <-time.After(time.Until(r.at.Add(rlock.DefaultClaimWindow + time.Second))):
			}
			if n, err := rw.HoldCount(r.lc); err != nil || n != 1 {
				t.Errorf("HoldCount past the claim window = %d, %v; want 1", n, err)
			}
			if tok, _ := rw.Token(r.lc); tok != token {
				t.Errorf("token = %d after the extension, want %d (the grant's)", tok, token)
			}
			rwUnlock(t, rw, r.lc, write)
		})
	}
}

// A WithLease hold granted the lock while queued confirms the grant on
// receipt, with one round trip that sets its whole lease: the watchdog, which
// extends claims, does not renew it.
func TestRWClaimWithLease(t *testing.T) {
	for _, write := range []bool{true, false} {
		t.Run(rwWord(write), func(t *testing.T) {
			e := ftNewEnv(t)
			const name = "rw-claim-lease"
			const lease = 20 * time.Second
			holder, waiter := e.client(), e.client()
			held := rwLock(t, e.ctx, holder.RWMutex(name), true)
			ch := rwLockAsync(e.ctx, waiter.RWMutex(name), write, rlock.WithLease(lease))
			e.rwQueuedIs(name, 1)
			rwUnlock(t, holder.RWMutex(name), held, true)
			r := receiveLock(t, ch, ftPatience, "the waiter")
			if ttl := e.rwTTL(name, write); ttl <= rlock.DefaultClaimWindow || ttl > lease {
				t.Fatalf("TTL of a WithLease hold just granted = %v; want its lease (%v)", ttl, lease)
			}
			rwUnlock(t, waiter.RWMutex(name), r.lc, write)
		})
	}
}

// A writer at the head of the queue whose Client is stuck with its
// connections open when it is granted the lock: the reader queued behind it
// is told to re-check when the writer's claim lapses and gets the lock then,
// not after a lease; the writer behind that reader follows at its release.
// The stuck writer, once its connection moves again, reads a grant too old
// to trust, checks with Redis, queues again, and gets the lock later with a
// higher token.
func TestRWHungWriterHoldsQueueForClaimWindow(t *testing.T) {
	e := ftNewEnv(t)
	const name = "rw-claim-hung-writer"
	holder, next := e.client(), e.client()
	p, stuck := e.stuckClient()
	held := rwLock(t, e.ctx, holder.RWMutex(name), true)
	stuckCh := rwLockAsync(e.ctx, stuck.RWMutex(name), true)
	e.rwQueuedIs(name, 1)
	readerCh := rwLockAsync(e.ctx, next.RWMutex(name), false)
	e.rwQueuedIs(name, 2)
	writerCh := rwLockAsync(e.ctx, next.RWMutex(name), true)
	e.rwQueuedIs(name, 3)

	p.Stall()
	defer p.Resume()
	unlocked := time.Now()
	rwUnlock(t, holder.RWMutex(name), held, true)
	r := receiveLock(t, readerCh, 10*time.Second, "the reader behind the stuck writer")
	waited := r.at.Sub(unlocked)
	t.Logf("the reader behind the stuck writer got the lock %v after the unlock", waited)
	if waited < rlock.DefaultClaimWindow/2 {
		t.Errorf("the reader got the lock %v after the unlock: before the stuck writer's claim could lapse", waited)
	}
	rwUnlock(t, next.RWMutex(name), r.lc, false)
	w := receiveLock(t, writerCh, ftPatience, "the writer behind the reader")
	token, _ := next.RWMutex(name).Token(w.lc)

	p.Resume()
	e.rwQueuedIs(name, 1) // the stuck writer, queued again
	select {
	case s := <-stuckCh:
		t.Fatalf("the resumed writer's Lock returned (%v) while another writer holds the lock", s.err)
	default:
	}
	rwUnlock(t, next.RWMutex(name), w.lc, true)
	s := receiveLock(t, stuckCh, ftPatience, "the resumed writer")
	if got, _ := stuck.RWMutex(name).Token(s.lc); got <= token {
		t.Errorf("the resumed writer's token %d is not above the last writer's %d", got, token)
	}
	rwUnlock(t, stuck.RWMutex(name), s.lc, true)
}

// Two writers at the head, each stuck with its connections open: each is
// granted the lock in turn for its claim window, and the live writer behind
// them gets it after about two windows, not at its own re-check (4/5 of the
// watchdog timeout): told when the first claim lapses, its re-check granted
// the lock to the second and learned when that claim lapses in turn.
func TestRWTwoHungWritersInARow(t *testing.T) {
	e := ftNewEnv(t)
	const name = "rw-claim-two-hung"
	holder, next := e.client(), e.client()
	p1, stuck1 := e.stuckClient()
	p2, stuck2 := e.stuckClient()
	held := rwLock(t, e.ctx, holder.RWMutex(name), true)
	rwLockAsync(e.ctx, stuck1.RWMutex(name), true)
	e.rwQueuedIs(name, 1)
	rwLockAsync(e.ctx, stuck2.RWMutex(name), true)
	e.rwQueuedIs(name, 2)
	writerCh := rwLockAsync(e.ctx, next.RWMutex(name), true)
	e.rwQueuedIs(name, 3)

	p1.Stall()
	p2.Stall()
	defer p1.Resume()
	defer p2.Resume()
	unlocked := time.Now()
	rwUnlock(t, holder.RWMutex(name), held, true)
	w := receiveLock(t, writerCh, 4*rlock.DefaultClaimWindow, "the writer behind two stuck ones")
	waited := w.at.Sub(unlocked)
	t.Logf("the writer behind two stuck ones got the lock %v after the unlock (claim window %v)", waited, rlock.DefaultClaimWindow)
	if waited < rlock.DefaultClaimWindow {
		t.Errorf("the writer got the lock %v after the unlock: before the first stuck writer's claim could lapse", waited)
	}
	p1.Resume()
	p2.Resume()
	rwUnlock(t, next.RWMutex(name), w.lc, true)
}

// Readers granted together, one of them stuck with its connections open: the
// writer queued behind them is told to re-check when the readers' claims
// lapse, and gets the lock once the live reader is done and the stuck one's
// claim lapsed, not after a lease. The stuck reader, once its connection
// moves again, does not trust its old grant: it queues again and reads after
// the writer.
func TestRWHungReaderAmongGranted(t *testing.T) {
	e := ftNewEnv(t)
	const name = "rw-claim-hung-reader"
	holder, live, writer := e.client(), e.client(), e.client()
	p, stuck := e.stuckClient()
	held := rwLock(t, e.ctx, holder.RWMutex(name), true)
	liveCh := rwLockAsync(e.ctx, live.RWMutex(name), false)
	e.rwQueuedIs(name, 1)
	stuckCh := rwLockAsync(e.ctx, stuck.RWMutex(name), false)
	e.rwQueuedIs(name, 2)
	writerCh := rwLockAsync(e.ctx, writer.RWMutex(name), true)
	e.rwQueuedIs(name, 3)

	p.Stall()
	defer p.Resume()
	unlocked := time.Now()
	rwUnlock(t, holder.RWMutex(name), held, true)
	r := receiveLock(t, liveCh, ftPatience, "the live reader")
	rwUnlock(t, live.RWMutex(name), r.lc, false)
	w := receiveLock(t, writerCh, 10*time.Second, "the writer behind the stuck reader")
	waited := w.at.Sub(unlocked)
	t.Logf("the writer behind the stuck reader got the lock %v after the unlock", waited)
	if waited < rlock.DefaultClaimWindow/2 {
		t.Errorf("the writer got the lock %v after the unlock: before the stuck reader's claim could lapse", waited)
	}

	p.Resume()
	e.rwQueuedIs(name, 1) // the stuck reader, queued again
	select {
	case s := <-stuckCh:
		t.Fatalf("the resumed reader's RLock returned (%v) while a writer holds the lock", s.err)
	default:
	}
	rwUnlock(t, writer.RWMutex(name), w.lc, true)
	s := receiveLock(t, stuckCh, ftPatience, "the resumed reader")
	rwUnlock(t, stuck.RWMutex(name), s.lc, false)
}
