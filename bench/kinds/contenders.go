package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/rlock"
)

// contender is one implementation at a point.
type contender struct {
	slug, name, config string
	// own marks the library's own baselines (the Mutex beside the RWMutex, the
	// default mode beside FIFO): shown, but not a peer to beat.
	own bool
	// open connects one Client to the point's servers.
	open func(ctx context.Context, addrs []string) (client, error)
}

// client is one Client of a contender.
type client interface {
	// acquire takes every lock of names (sorted, distinct), for reading when
	// read is set and the contender has a shared mode; release gives them
	// all back.
	acquire(ctx context.Context, names []string, read bool) (release func(context.Context) error, err error)
	close()
}

// leaseTTL is the peers' lock expiry: far beyond any critical section.
const leaseTTL = 30 * time.Second

func newRueidis(addr string) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true})
}

// --- rlock.Mutex, default or FIFO ---

type rlockClient struct {
	rc rueidis.Client
	c  *rlock.Client
}

func rlockExclusive(fifo bool) contender {
	ct := contender{slug: "rlock", name: "rlock.Mutex", own: true, config: "defaults: cohort passes and turns (linger 1ms) within a Client"}
	if fifo {
		ct = contender{slug: "rlock-fifo", name: "rlock.Mutex FIFO", config: "FIFO mode: every Lock queues in Redis, strict arrival order"}
	}
	ct.open = func(_ context.Context, addrs []string) (client, error) {
		rc, err := newRueidis(addrs[0])
		if err != nil {
			return nil, err
		}
		var opts []rlock.Option
		if fifo {
			opts = append(opts, fifoOption())
		}
		c, err := rlock.New(rc, opts...)
		if err != nil {
			rc.Close()
			return nil, err
		}
		return &rlockClient{rc: rc, c: c}, nil
	}
	return ct
}

func (l *rlockClient) acquire(ctx context.Context, names []string, _ bool) (func(context.Context) error, error) {
	if len(names) != 1 {
		return nil, errors.New("rlock.Mutex takes one lock at a time")
	}
	m := l.c.Mutex(names[0])
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.Unlock(lockCtx) }, nil
}

func (l *rlockClient) close() {
	_ = l.c.Close()
	l.rc.Close()
}

// --- rlock.RWMutex ---

type rwClient struct{ *rlockClient }

func rwMutex() contender {
	return contender{slug: "rlock-rw", name: "rlock.RWMutex", config: "RLock for reads, Lock for writes; writer preference",
		open: func(ctx context.Context, addrs []string) (client, error) {
			c, err := rlockExclusive(false).open(ctx, addrs)
			if err != nil {
				return nil, err
			}
			return rwClient{c.(*rlockClient)}, nil
		}}
}

func (l rwClient) acquire(ctx context.Context, names []string, read bool) (func(context.Context) error, error) {
	rw := l.c.RWMutex(names[0])
	if read {
		lockCtx, err := rw.RLock(ctx)
		if err != nil {
			return nil, err
		}
		return func(context.Context) error { return rw.RUnlock(lockCtx) }, nil
	}
	lockCtx, err := rw.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return rw.Unlock(lockCtx) }, nil
}

// --- rlock.MultiLock ---

type multiClient struct{ *rlockClient }

func multiLock() contender {
	return contender{slug: "rlock-multi", name: "rlock.MultiLock", config: "all or nothing over the set, one deterministic order",
		open: func(ctx context.Context, addrs []string) (client, error) {
			c, err := rlockExclusive(false).open(ctx, addrs)
			if err != nil {
				return nil, err
			}
			return multiClient{c.(*rlockClient)}, nil
		}}
}

func (l multiClient) acquire(ctx context.Context, names []string, _ bool) (func(context.Context) error, error) {
	ml := l.c.MultiLock(names...)
	lockCtx, err := ml.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return ml.Unlock(lockCtx) }, nil
}

// --- rlock quorum ---

type quorumClient struct {
	rcs []rueidis.Client
	q   *rlock.Quorum
}

func quorumMutex() contender {
	return contender{slug: "rlock-quorum", name: "rlock quorum", config: "rlock.NewQuorum over every master, watchdog lease",
		open: func(_ context.Context, addrs []string) (client, error) {
			var rcs []rueidis.Client
			for _, a := range addrs {
				rc, err := newRueidis(a)
				if err != nil {
					for _, r := range rcs {
						r.Close()
					}
					return nil, err
				}
				rcs = append(rcs, rc)
			}
			q, err := rlock.NewQuorum(rcs...)
			if err != nil {
				for _, r := range rcs {
					r.Close()
				}
				return nil, err
			}
			return &quorumClient{rcs: rcs, q: q}, nil
		}}
}

func (l *quorumClient) acquire(ctx context.Context, names []string, _ bool) (func(context.Context) error, error) {
	m := l.q.Mutex(names[0])
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { return m.Unlock(lockCtx) }, nil
}

func (l *quorumClient) close() {
	quorumClose(l.q)
	for _, r := range l.rcs {
		r.Close()
	}
}

// --- spin SET NX, one lock after another in sorted order ---

type spinClient struct {
	rc rueidis.Client
	s  *measure.SpinLocker
}

var spinIDs atomic.Int64

func spinExclusive() contender {
	return contender{slug: "spin", name: "spin SET NX",
		config: fmt.Sprintf("SET NX PX 30s, retry %v doubling to %v; sets taken lock by lock in sorted order", measure.SpinMinBackoff, measure.SpinMaxBackoff),
		open: func(_ context.Context, addrs []string) (client, error) {
			rc, err := newRueidis(addrs[0])
			if err != nil {
				return nil, err
			}
			return &spinClient{rc: rc, s: measure.NewSpinLocker(rc, "spin"+strconv.FormatInt(spinIDs.Add(1), 10), leaseTTL)}, nil
		}}
}

func (l *spinClient) acquire(ctx context.Context, names []string, _ bool) (func(context.Context) error, error) {
	return inOrder(ctx, names, func(ctx context.Context, name string) (func(context.Context) error, error) {
		return l.s.Lock(ctx, name)
	})
}

func (l *spinClient) close() { l.rc.Close() }

// --- redsync, on 1 or 5 pools ---

type redsyncClient struct {
	rcs  []*goredislib.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

// redsyncExclusive is redsync over pools masters, retrying every retry (0:
// its default, 50-250ms at random), with unlimited tries within the wait.
func redsyncExclusive(pools int, retry time.Duration) contender {
	ct := contender{slug: "redsync", name: "redsync", config: "defaults (retry every 50-250ms at random, expiry 8s)"}
	if retry > 0 {
		ct.slug, ct.name, ct.config = "redsync-1ms", "redsync 1ms", "WithRetryDelay(1ms), expiry 8s"
	}
	if pools > 1 {
		ct.slug += "-" + strconv.Itoa(pools)
		ct.name += fmt.Sprintf(" (%d pools)", pools)
		ct.config += fmt.Sprintf(", quorum over %d masters", pools)
	}
	ct.config += ", tries unlimited; sets taken lock by lock in sorted order"
	ct.open = func(_ context.Context, addrs []string) (client, error) {
		c := &redsyncClient{}
		var ps []redis.Pool
		for _, a := range addrs[:pools] {
			rc := goredislib.NewClient(&goredislib.Options{Addr: a})
			c.rcs = append(c.rcs, rc)
			ps = append(ps, goredis.NewPool(rc))
		}
		c.rs = redsync.New(ps...)
		c.opts = []redsync.Option{redsync.WithTries(1 << 30)}
		if retry > 0 {
			c.opts = append(c.opts, redsync.WithRetryDelay(retry))
		}
		return c, nil
	}
	return ct
}

func (l *redsyncClient) acquire(ctx context.Context, names []string, _ bool) (func(context.Context) error, error) {
	return inOrder(ctx, names, func(ctx context.Context, name string) (func(context.Context) error, error) {
		m := l.rs.NewMutex(name, l.opts...)
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock found the lock taken by another owner")
			}
			return err
		}, nil
	})
}

func (l *redsyncClient) close() {
	for _, rc := range l.rcs {
		_ = rc.Close()
	}
}

// inOrder takes the locks of names one after another (names are sorted, so
// two overlapping sets never deadlock) and releases them all together; a
// failure gives back what was taken.
func inOrder(ctx context.Context, names []string, lock func(context.Context, string) (func(context.Context) error, error)) (func(context.Context) error, error) {
	var held []func(context.Context) error
	releaseAll := func(ctx context.Context) error {
		var errs []error
		for i := len(held) - 1; i >= 0; i-- {
			errs = append(errs, held[i](ctx))
		}
		return errors.Join(errs...)
	}
	for _, name := range names {
		unlock, err := lock(ctx, name)
		if err != nil {
			_ = releaseAll(context.WithoutCancel(ctx))
			return nil, err
		}
		held = append(held, unlock)
	}
	return releaseAll, nil
}
