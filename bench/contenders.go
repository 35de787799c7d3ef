package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/relockio/relock/internal/measure"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Contender is one lock implementation under test. Add one with register (in
// an init function); every scenario runs every registered contender.
type Contender struct {
	// Slug is a stable identifier, used by -contenders and in results.json.
	Slug string
	// Name is what tables and charts show.
	Name string
	// Config says in one line how the contender is set up.
	Config string
	// Open connects one client of the contender (its own connections, as a
	// separate process would have). Every command the client sends to Redis
	// must be counted in env.Requests.
	Open func(ctx context.Context, env OpenEnv) (LockClient, error)
	// Keys names the Redis keys that hold lock name, and how many of them must
	// exist for it to be held. The stuck-waiter probe uses it to tell whether a
	// lock is free.
	Keys func(prefix, name string) (keys []string, quorum int)
	// Cluster tells that Open can connect to a Redis Cluster (OpenEnv.Cluster);
	// ClusterOnly that the contender runs at the cluster points only, where it
	// differs from another (rlock with classic pub/sub).
	Cluster, ClusterOnly bool
	// OnRequest: the contender runs only when -contenders names it (a
	// variant of another, for a side-by-side comparison).
	OnRequest bool
}

// OpenEnv is what Contender.Open gets.
type OpenEnv struct {
	Addr     string            // Redis host:port
	Cluster  []string          // the masters of a Redis Cluster, when the point runs on one (Addr is one of them)
	Prefix   string            // every key of the run starts with it (no braces)
	Requests *measure.Requests // counts the commands the client sends
}

// LockClient is one client of a contender.
type LockClient interface {
	// Lock blocks until it holds lock name or ctx ends. ctx carries the
	// waiting deadline; the caller keeps it alive until Unlock returned, so
	// an implementation may derive the hold from it.
	Lock(ctx context.Context, name string) (Held, error)
	// Close releases the client's connections.
	Close() error
}

// Held is one acquisition; Unlock releases it.
type Held interface {
	Unlock(ctx context.Context) error
}

// messageCounter is a LockClient that can tell how many pub/sub messages
// its connections received (ok false when it cannot).
type messageCounter interface {
	MessagesReceived() (n int64, ok bool)
}

type heldFunc func(ctx context.Context) error

func (f heldFunc) Unlock(ctx context.Context) error { return f(ctx) }

var registry []Contender

func register(c Contender) { registry = append(registry, c) }

func contenderBySlug(slug string) (Contender, bool) {
	for _, c := range registry {
		if c.Slug == slug {
			return c, true
		}
	}
	return Contender{}, false
}

// Settings shared by the peers: a lease far longer than any critical
// section, so that no run ever sees a lease run out.
const (
	leaseTTL = 30 * time.Second
	// unlimitedTries makes redsync wait until its context ends, like the
	// other contenders, instead of giving up after its default 32 tries.
	unlimitedTries = math.MaxInt32
)

func init() {
	register(Contender{
		Slug:   "rlock",
		Name:   "rlock.Mutex",
		Config: "defaults (watchdog lease 30s, pub/sub wake-ups, 1 pub/sub connection per client)",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRlock(ctx, env)
		},
		Keys:    rlockKeys,
		Cluster: true,
	})
	register(Contender{
		Slug: "rlock-classic",
		Name: "rlock classic pub/sub",
		Config: "rlock.Mutex with rlock.WithPubSub(pubsub.WithSharding(pubsub.ShardingClassic)): SUBSCRIBE/PUBLISH, which a cluster " +
			"broadcasts to every node over its bus (cluster points only; elsewhere it is rlock.Mutex)",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRlock(ctx, env, rlock.WithPubSub(pubsub.WithSharding(pubsub.ShardingClassic)))
		},
		Keys:        rlockKeys,
		Cluster:     true,
		ClusterOnly: true,
	})
	register(Contender{
		Slug:   "rlock-functions",
		Name:   "rlock, Redis functions",
		Config: "rlock.Mutex with rlock.WithRedisFunctions(true): its scripts called as Redis functions, not sent by EVALSHA (on request only)",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRlock(ctx, env, rlock.WithRedisFunctions(true))
		},
		Keys:      rlockKeys,
		Cluster:   true,
		OnRequest: true,
	})
	register(Contender{
		Slug:   "semaphore",
		Name:   "semaphore 1 permit",
		Config: "semaphore.NewLock: a semaphore with limit 1, permits as watchdog leases (30s), same Client machinery as rlock",
		Open:   openSemaphoreLock,
		Keys: func(prefix, name string) ([]string, int) {
			// The permits zset exists exactly while a permit is held.
			return []string{prefix + ":{" + name + "}:sem:permits"}, 1
		},
	})
	register(Contender{
		Slug:   "rueidislock",
		Name:   "rueidislock",
		Config: "defaults (KeyMajority 2: 3 keys per lock, client-side-caching wake-ups)",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRueidislock(env, rueidislock.LockerOption{})
		},
		Keys: rueidislockKeys(2),
	})
	register(Contender{
		Slug:   "rueidislock-km1",
		Name:   "rueidislock KM1",
		Config: "KeyMajority 1 + NoLoopTracking, as its README recommends for one Redis",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRueidislock(env, rueidislock.LockerOption{KeyMajority: 1, NoLoopTracking: true})
		},
		Keys: rueidislockKeys(1),
	})
	register(Contender{
		Slug:   "redsync",
		Name:   "redsync",
		Config: "defaults (retry every 50-250ms at random, expiry 8s), tries unlimited within the wait",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRedsync(env, redsync.WithTries(unlimitedTries))
		},
		Keys: plainKey,
	})
	register(Contender{
		Slug:   "redsync-1ms",
		Name:   "redsync 1ms",
		Config: "WithRetryDelay(1ms), tries unlimited within the wait (expiry 8s)",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRedsync(env, redsync.WithTries(unlimitedTries), redsync.WithRetryDelay(time.Millisecond))
		},
		Keys: plainKey,
	})
	register(Contender{
		Slug:   "redislock-linear",
		Name:   "redislock linear",
		Config: "LinearBackoff(10ms), TTL 30s",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRedislock(env, func() redislock.RetryStrategy {
				return redislock.LinearBackoff(10 * time.Millisecond)
			})
		},
		Keys: plainKey,
	})
	register(Contender{
		Slug:   "redislock-exp",
		Name:   "redislock exp",
		Config: "ExponentialBackoff(16ms, 256ms) (16ms is its documented minimum), TTL 30s",
		Open: func(ctx context.Context, env OpenEnv) (LockClient, error) {
			return openRedislock(env, func() redislock.RetryStrategy {
				return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
			})
		},
		Keys: plainKey,
	})
	register(Contender{
		Slug:    "spin",
		Name:    "spin SET NX",
		Config:  fmt.Sprintf("SET NX PX 30s, retry backoff %v doubling to %v, compare-and-delete release", measure.SpinMinBackoff, measure.SpinMaxBackoff),
		Open:    openSpin,
		Keys:    plainKey,
		Cluster: true,
	})
}

func plainKey(prefix, name string) ([]string, int) { return []string{prefix + ":" + name}, 1 }

func rlockKeys(prefix, name string) ([]string, int) { return []string{prefix + ":{" + name + "}"}, 1 }

// newRueidis returns a rueidis client for env's server, or a cluster client
// seeded with its masters, that counts its commands.
func newRueidis(env OpenEnv) (rueidis.Client, error) {
	opt := rueidis.ClientOption{InitAddress: []string{env.Addr}, ForceSingleClient: true}
	if len(env.Cluster) > 0 {
		opt = rueidis.ClientOption{InitAddress: env.Cluster}
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	return measure.CountingClient(rc, env.Requests), nil
}

// newGoRedis returns a go-redis client for addr, as the peers' READMEs set it
// up, that counts its commands.
func newGoRedis(env OpenEnv) *goredislib.Client {
	c := goredislib.NewClient(&goredislib.Options{Addr: env.Addr})
	c.AddHook(countingHook{n: env.Requests})
	return c
}

// --- rlock.Mutex ---

type rlockClient struct {
	rc rueidis.Client
	c  *rlock.Client
}

func openRlock(_ context.Context, env OpenEnv, opts ...rlock.Option) (LockClient, error) {
	rc, err := newRueidis(env)
	if err != nil {
		return nil, err
	}
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithKeyPrefix(env.Prefix)}, opts...)...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &rlockClient{rc: rc, c: c}, nil
}

func (l *rlockClient) Lock(ctx context.Context, name string) (Held, error) {
	m := l.c.Mutex(name)
	lockCtx, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return heldFunc(func(context.Context) error { return m.Unlock(lockCtx) }), nil
}

// MessagesReceived reads the messages counter of the Client's pub/sub
// multiplexer, which the semaphore shares.
func (l *rlockClient) MessagesReceived() (int64, bool) { return pubsubMessages(l.c) }

// pubsubMessages returns c.PubSubStats().Messages. It looks both up at run
// time, so that the bench builds against a relock that has neither (the
// figure is then reported as not counted): the counter is a recent addition
// to the library.
func pubsubMessages(c any) (int64, bool) {
	sc, ok := c.(interface{ PubSubStats() pubsub.Stats })
	if !ok {
		return 0, false
	}
	f := reflect.ValueOf(sc.PubSubStats()).FieldByName("Messages")
	if !f.IsValid() || !f.CanInt() {
		return 0, false
	}
	return f.Int(), true
}

func (l *rlockClient) Close() error {
	err := l.c.Close()
	l.rc.Close()
	return err
}

// --- semaphore with one permit ---

type semaphoreClient struct{ *rlockClient }

func openSemaphoreLock(ctx context.Context, env OpenEnv) (LockClient, error) {
	lc, err := openRlock(ctx, env)
	if err != nil {
		return nil, err
	}
	return semaphoreClient{lc.(*rlockClient)}, nil
}

func (l semaphoreClient) Lock(ctx context.Context, name string) (Held, error) {
	sl := semaphore.NewLock(l.c, name)
	permitCtx, err := sl.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return heldFunc(func(context.Context) error { return sl.Unlock(permitCtx) }), nil
}

// --- rueidislock ---

type rueidisLocker struct{ l rueidislock.Locker }

func openRueidislock(env OpenEnv, opt rueidislock.LockerOption) (LockClient, error) {
	opt.KeyPrefix = env.Prefix
	opt.ClientOption.InitAddress = []string{env.Addr}
	opt.ClientOption.ForceSingleClient = true
	opt.ClientBuilder = func(o rueidis.ClientOption) (rueidis.Client, error) {
		rc, err := rueidis.NewClient(o)
		if err != nil {
			return nil, err
		}
		return measure.CountingClient(rc, env.Requests), nil
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l}, nil
}

func (r *rueidisLocker) Lock(ctx context.Context, name string) (Held, error) {
	// The hold lives as long as the returned context; cancel releases it
	// (deleting the keys) and waits for that.
	_, cancel, err := r.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return heldFunc(func(context.Context) error { cancel(); return nil }), nil
}

func (r *rueidisLocker) Close() error { r.l.Close(); return nil }

// rueidislockKeys are the KeyMajority*2-1 keys "prefix:i:name".
func rueidislockKeys(majority int) func(prefix, name string) ([]string, int) {
	return func(prefix, name string) ([]string, int) {
		keys := make([]string, 2*majority-1)
		for i := range keys {
			keys[i] = prefix + ":" + strconv.Itoa(i) + ":" + name
		}
		return keys, majority
	}
}

// --- redsync ---

type redsyncClient struct {
	rc   *goredislib.Client
	rs   *redsync.Redsync
	opts []redsync.Option
	pfx  string
}

func openRedsync(env OpenEnv, opts ...redsync.Option) (LockClient, error) {
	rc := newGoRedis(env)
	return &redsyncClient{rc: rc, rs: redsync.New(goredis.NewPool(rc)), opts: opts, pfx: env.Prefix}, nil
}

func (r *redsyncClient) Lock(ctx context.Context, name string) (Held, error) {
	m := r.rs.NewMutex(r.pfx+":"+name, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (redsync: %v)", ctx.Err(), err)
		}
		return nil, err
	}
	return heldFunc(func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock found the lock taken by another owner")
		}
		return err
	}), nil
}

func (r *redsyncClient) Close() error { return r.rc.Close() }

// --- bsm/redislock ---

type redislockClient struct {
	rc    *goredislib.Client
	lc    *redislock.Client
	retry func() redislock.RetryStrategy // a fresh one per Obtain: exponential backoff keeps state
	pfx   string
}

func openRedislock(env OpenEnv, retry func() redislock.RetryStrategy) (LockClient, error) {
	rc := newGoRedis(env)
	return &redislockClient{rc: rc, lc: redislock.New(rc), retry: retry, pfx: env.Prefix}, nil
}

func (r *redislockClient) Lock(ctx context.Context, name string) (Held, error) {
	l, err := r.lc.Obtain(ctx, r.pfx+":"+name, leaseTTL, &redislock.Options{RetryStrategy: r.retry()})
	if err != nil {
		return nil, err
	}
	return heldFunc(l.Release), nil
}

func (r *redislockClient) Close() error { return r.rc.Close() }
