package rlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// quorumListener hears the releases announced on the lock's unlock channel of
// every master for one blocking Lock call, and turns them into wake-ups of
// that call. Each master has its own subscription, made in the background:
// a master that cannot be reached keeps being retried (by its Client's
// multiplexer) without holding up the others, and wakes the call when it is
// subscribed again, since releases may have been missed meanwhile.
type quorumListener struct {
	wake      chan struct{} // buffered 1: wake-ups coalesce
	ready     chan struct{} // one value per master once its subscription is settled
	satisfied atomic.Bool   // the call got the lock (see mux.Waiter.Leave)
	heard     []atomic.Bool // per master: it announced a release since the last drain
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// tag names the Lock call (its gate place's id): a message addressed to it
// wakes it alone (see quorum_acquire.lua).
func (qm *QuorumMutex) listen(ctx context.Context, tag string) *quorumListener {
	ctx, cancel := context.WithCancel(ctx)
	n := len(qm.q.masters)
	l := &quorumListener{wake: make(chan struct{}, 1), ready: make(chan struct{}, n), cancel: cancel, heard: make([]atomic.Bool, n)}
	for i, mc := range qm.q.masters {
		l.wg.Go(func() {
			w, err := mc.c.Mux.SubscribeWeighted(ctx, qm.keys.channel, 1)
			if err == nil {
				w.SetTag(tag)
			}
			l.ready <- struct{}{}
			if err != nil {
				return // the wait ended, the Client closed, or the channel is refused
			}
			defer func() { w.Leave(l.satisfied.Load()) }()
			for {
				select {
				case <-w.C():
					l.heard[i].Store(true)
					l.notify()
					if w.Err() != nil {
						return // refused for good: the other masters and the timer remain
					}
				case <-w.Done():
					return
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return l
}

func (l *quorumListener) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// awaitReady waits until every master's subscription is settled, or for at
// most d: a master that does not answer is not waited for (a release it
// announces before its subscription is up is missed, which costs at most the
// holder's lease).
func (l *quorumListener) awaitReady(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for range cap(l.ready) {
		select {
		case <-l.ready:
		case <-t.C:
			return
		}
	}
}

// drain forgets wake-ups received so far.
func (l *quorumListener) drain() {
	select {
	case <-l.wake:
	default:
	}
	for i := range l.heard {
		l.heard[i].Store(false)
	}
}

// stop ends the subscriptions and waits for their goroutines.
func (l *quorumListener) stop() {
	l.cancel()
	l.wg.Wait()
}
