package rlock_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// The ACL rules of the README's section "Deployment" (and of
// docs/operations.md), word for word (TestACLRulesInREADME checks that the README shows
// them so, after "ACL SETUSER locks "): the least-privilege user of the
// default key prefix on a single Redis (or a Sentinel-managed one), and on
// every node of a Redis Cluster. The other tests here create the user from
// them and run every lock kind under it.
const (
	aclUserName = "locks"
	aclPassword = "CHANGE-ME"

	aclCommon = "reset on >CHANGE-ME resetchannels ~rlock:{* &rlock:{* " +
		"+evalsha +eval +time +exists +get +set +del +incr +incrby +pexpire +pexpireat +persist +pttl " +
		"+hget +hmget +hset +hdel +hexists +hincrby +hkeys +zadd +zcard +zrange +zrangebyscore +zrem +zscore"
	aclRules        = aclCommon + " +publish +subscribe +unsubscribe +ping +client|tracking"
	aclClusterRules = aclCommon + " +spublish +ssubscribe +sunsubscribe +ping +client|tracking +cluster|slots +cluster|shards +asking +readwrite"

	// aclCacheRule is what a client with rueidis's client-side cache
	// disabled (DisableCache) does not need.
	aclCacheRule = "+client|tracking"
	// aclSentinelRule is added on the data nodes behind Sentinel.
	aclSentinelRule = "+role"
	// aclReplicaAckRule is added for rlock.WithReplicaAck.
	aclReplicaAckRule = "+wait"
	// aclFunctionRules are added for the scripts to run as Redis functions
	// (rlock.WithRedisFunctions).
	aclFunctionRules = "+fcall +function|load"
)

// aclLease is the watchdog timeout of the Clients of the ACL tests: short,
// so that renewals under the ACL user happen within the test.
const aclLease = time.Second

// setACLUser creates (or resets) the user aclUserName on srv with rules (a
// space-separated rule list, as above) and extra rules.
func setACLUser(t *testing.T, ctx context.Context, srv *redistest.Server, rules string, extra ...string) {
	t.Helper()
	args := append([]string{"ACL", "SETUSER", aclUserName}, strings.Fields(rules)...)
	args = append(args, extra...)
	if _, err := srv.Do(ctx, args...); err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
}

// withoutRule returns rules without the rule drop, which must be there.
func withoutRule(t *testing.T, rules, drop string) string {
	t.Helper()
	fields := strings.Fields(rules)
	i := slices.Index(fields, drop)
	if i < 0 {
		t.Fatalf("rule %s not in %q", drop, rules)
	}
	return strings.Join(slices.Delete(fields, i, i+1), " ")
}

// userOption logs a rueidis client in as the ACL user; the rest of the
// option is rueidis's default, as in the README (so on one address
// rueidis.NewClient asks CLUSTER SLOTS first, and the client-side cache is
// on).
func userOption(o *rueidis.ClientOption) {
	o.Username, o.Password = aclUserName, aclPassword
	o.ForceSingleClient = false
}

// aclClients returns two Clients of the ACL user, each on its own rueidis
// client (as two processes would have), closed at cleanup.
func aclClients(t *testing.T, newRC func() rueidis.Client, opts ...rlock.Option) (a, b *rlock.Client) {
	t.Helper()
	opts = append([]rlock.Option{rlock.WithWatchdogTimeout(aclLease)}, opts...)
	var cs [2]*rlock.Client
	for i := range cs {
		c, err := rlock.New(newRC(), opts...)
		if err != nil {
			t.Fatalf("New as the ACL user: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

// aclDenials returns what ACL LOG on srv recorded against the ACL user, as
// "reason object" ("command cluster|slots", "key other:x", ...).
func aclDenials(t *testing.T, ctx context.Context, srv *redistest.Server) []string {
	t.Helper()
	msg, err := srv.Do(ctx, "ACL", "LOG")
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	entries, err := msg.ToArray()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		fields, err := e.AsMap()
		if err != nil {
			t.Fatalf("ACL LOG entry: %v", err)
		}
		field := func(name string) string {
			v := fields[name]
			s, _ := v.ToString()
			return s
		}
		user, reason, object := field("username"), field("reason"), field("object")
		if user == aclUserName {
			out = append(out, reason+" "+object)
		}
	}
	return out
}

// checkNoDenials fails the test if ACL LOG on srv recorded a denial of the
// ACL user other than allowed ones.
func checkNoDenials(t *testing.T, ctx context.Context, srv *redistest.Server, allowed ...string) {
	t.Helper()
	for _, d := range aclDenials(t, ctx, srv) {
		if !slices.Contains(allowed, d) {
			t.Errorf("ACL LOG on %s: the ACL user was denied %q", srv, d)
		}
	}
}

// aclWorkload runs, through Clients a and b of the ACL user, what the README
// says its rule covers: Mutex hand-offs between Clients (the waiter queued in
// Redis and woken on its grant channel), re-entry, TryLock, inspection,
// contention, a hold renewed by the watchdog past its lease, ForceUnlock,
// FairMutex, RWMutex, MultiLock, a semaphore handing its permit to a waiter
// of the other Client, and SetLimit. admin is a client of the default user,
// for watching the queues in Redis. (lockResult, of claim_test.go, carries
// what calls made in goroutines returned.)
func aclWorkload(t *testing.T, ctx context.Context, admin rueidis.Client, a, b *rlock.Client) {
	t.Helper()
	queued := func(key string) {
		t.Helper()
		eventually(t, 10*time.Second, "no waiter queued in "+key, func() bool {
			n, err := admin.Do(ctx, admin.B().Zcard().Key(key).Build()).AsInt64()
			return err == nil && n > 0
		})
	}
	receive := func(what string, ch <-chan lockResult) context.Context {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s: %v", what, r.err)
			}
			return r.lc
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
			return nil
		}
	}

	// Mutex: held by a, re-entered, inspected and refused to b, then handed
	// to b's queued waiter by a's Unlock.
	ma, mb := a.Mutex("orders:42"), b.Mutex("orders:42")
	held, err := ma.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	again, err := ma.Lock(held)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if n, err := ma.HoldCount(again); n != 2 || err != nil {
		t.Errorf("HoldCount after re-entry = %d, %v; want 2", n, err)
	}
	if err := ma.Unlock(again); err != nil {
		t.Fatalf("Unlock of the re-entry: %v", err)
	}
	first, err := ma.Token(held)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.TryLock(ctx); !errors.Is(err, rlock.ErrLocked) {
		t.Errorf("TryLock of a held lock: %v, want ErrLocked", err)
	}
	if locked, err := mb.IsLocked(ctx); !locked || err != nil {
		t.Errorf("IsLocked = %v, %v; want true", locked, err)
	}
	if ttl, err := mb.TTL(ctx); ttl <= 0 || err != nil {
		t.Errorf("TTL = %v, %v; want a lease", ttl, err)
	}
	got := make(chan lockResult, 1)
	go func() {
		lockCtx, err := mb.Lock(ctx)
		got <- lockResult{lc: lockCtx, err: err}
	}()
	queued("rlock:{orders:42}:queue")
	if err := ma.Unlock(held); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	handed := receive("Lock of the waiter", got)
	if tok, err := mb.Token(handed); err != nil || tok <= first {
		t.Errorf("token handed over = %d, %v; want above %d", tok, err, first)
	}
	if err := mb.Unlock(handed); err != nil {
		t.Fatalf("Unlock after the hand-off: %v", err)
	}

	// Contention: 3 goroutines of each Client, 5 holds each.
	var inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for i := range 6 {
		m := []*rlock.Mutex{ma, mb}[i%2]
		wg.Go(func() {
			for range 5 {
				lockCtx, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("contended Lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := m.Unlock(lockCtx); err != nil {
					t.Errorf("contended Unlock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping holds", overlaps.Load())
	}

	// The watchdog keeps a hold past its lease: without a renewal allowed by
	// the rule the key would expire and the lock context end.
	held, err = ma.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		t.Fatalf("hold lost before 1.5 leases: %v", context.Cause(held))
	case <-time.After(3 * aclLease / 2):
	}
	if n, err := ma.HoldCount(held); n != 1 || err != nil {
		t.Errorf("HoldCount after 1.5 leases = %d, %v; want 1", n, err)
	}
	if err := ma.Unlock(held); err != nil {
		t.Fatalf("Unlock after renewals: %v", err)
	}

	// ForceUnlock by b ends a's hold.
	held, err = ma.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := mb.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v; want true", ok, err)
	}
	select {
	case <-held.Done():
		if !errors.Is(context.Cause(held), rlock.ErrLeaseLost) {
			t.Errorf("cause after ForceUnlock: %v, want ErrLeaseLost", context.Cause(held))
		}
	case <-ctx.Done():
		t.Fatal("the holder never learned of the ForceUnlock")
	}
	_ = ma.Unlock(held) // ErrNotHeld: the hold is gone

	// FairMutex and MultiLock.
	fair := a.FairMutex("fair")
	if lockCtx, err := fair.Lock(ctx); err != nil {
		t.Errorf("FairMutex Lock: %v", err)
	} else if err := fair.Unlock(lockCtx); err != nil {
		t.Errorf("FairMutex Unlock: %v", err)
	}
	multi := b.MultiLock("account:7", "account:3")
	if lockCtx, err := multi.Lock(ctx); err != nil {
		t.Errorf("MultiLock Lock: %v", err)
	} else if err := multi.Unlock(lockCtx); err != nil {
		t.Errorf("MultiLock Unlock: %v", err)
	}

	// RWMutex: a reader of a, then a writer of b waiting for it.
	rwa, rwb := a.RWMutex("catalog"), b.RWMutex("catalog")
	readCtx, err := rwa.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	go func() {
		lockCtx, err := rwb.Lock(ctx)
		got <- lockResult{lc: lockCtx, err: err}
	}()
	queued("rlock:{catalog}:rw:queue")
	if err := rwa.RUnlock(readCtx); err != nil {
		t.Fatalf("RUnlock: %v", err)
	}
	if err := rwb.Unlock(receive("RWMutex Lock of the waiting writer", got)); err != nil {
		t.Fatalf("RWMutex Unlock: %v", err)
	}

	// Semaphore: a holds the only permit, b waits, a's Release hands it over.
	sa := semaphore.New(a, "gpu-pool", semaphore.WithLimit(1))
	sb := semaphore.New(b, "gpu-pool", semaphore.WithLimit(1))
	permit, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := sb.TryAcquire(ctx, 1); !errors.Is(err, semaphore.ErrNoPermits) {
		t.Errorf("TryAcquire with no permit left: %v, want ErrNoPermits", err)
	}
	go func() {
		permitCtx, err := sb.Acquire(ctx, 1)
		got <- lockResult{lc: permitCtx, err: err}
	}()
	queued("rlock:{gpu-pool}:sem:queue")
	if err := sa.Release(permit); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := sb.Release(receive("Acquire of the waiter", got)); err != nil {
		t.Fatalf("Release after the hand-off: %v", err)
	}
	if err := sb.SetLimit(ctx, 2); err != nil { // a limit set for good (PERSIST)
		t.Errorf("SetLimit: %v", err)
	}
	lock := semaphore.NewLock(a, "nightly")
	if lockCtx, err := lock.Lock(ctx); err != nil {
		t.Errorf("semaphore.Lock: %v", err)
	} else if err := lock.Unlock(lockCtx); err != nil {
		t.Errorf("semaphore.Unlock: %v", err)
	}
}

// checkConfined checks that the ACL user's rueidis client rc can reach
// nothing outside the prefix "rlock": no key or channel of another prefix
// (also "rlock-quorum", which starts the same, and "rlock:eu", nested in it),
// no listing of keys or channels, no FLUSHALL, and no Client of another
// prefix.
func checkConfined(t *testing.T, ctx context.Context, rc rueidis.Client) {
	t.Helper()
	b := rc.B()
	for what, cmd := range map[string]rueidis.Completed{
		"GET other:{x}":                b.Get().Key("other:{x}").Build(),
		"SET rlock-quorum:{x}":         b.Set().Key("rlock-quorum:{x}").Value("1").Build(),
		"HSET rlock:eu:{x}":            b.Hset().Key("rlock:eu:{x}").FieldValue().FieldValue("f", "1").Build(),
		"DEL rlockx":                   b.Del().Key("rlockx").Build(),
		"PUBLISH other:{x}:unlock":     b.Publish().Channel("other:{x}:unlock").Message("m").Build(),
		"PUBLISH rlock-quorum:{x}":     b.Publish().Channel("rlock-quorum:{x}:unlock").Message("m").Build(),
		"KEYS *":                       b.Keys().Pattern("*").Build(),
		"SCAN 0":                       b.Scan().Cursor(0).Build(),
		"FLUSHALL":                     b.Flushall().Build(),
		"PUBSUB CHANNELS":              b.PubsubChannels().Build(),
		"EVAL on a key of another one": b.Eval().Script("return 1").Numkeys(1).Key("other:{x}").Build(),
	} {
		err := rc.Do(ctx, cmd).Error()
		if re, ok := rueidis.IsRedisErr(err); !ok || !strings.HasPrefix(re.Error(), "NOPERM") {
			t.Errorf("%s as the ACL user: %v, want NOPERM", what, err)
		}
	}
	c, err := rlock.New(rc, rlock.WithKeyPrefix("other"))
	if c != nil {
		_ = c.Close()
	}
	if !errors.Is(err, rlock.ErrPermission) {
		t.Errorf("New with another key prefix as the ACL user: %v, want ErrPermission", err)
	}
}

// TestACLRulesInREADME: the README shows the rules the ACL tests run under,
// word for word, so that the two cannot drift apart.
func TestACLRulesInREADME(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ACL SETUSER " + aclUserName + " " + aclRules + "\n",
		"ACL SETUSER " + aclUserName + " " + aclClusterRules + "\n",
		"`" + aclCacheRule + "`", "`" + aclSentinelRule + "`", "`" + aclReplicaAckRule + "`",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not show %q", want)
		}
	}
}

// TestACLStandalone runs every lock kind under the README's ACL user on a
// single Redis, through rueidis clients with the README's options (the
// client-side cache on, so CLIENT TRACKING is needed; no ForceSingleClient,
// so rueidis asks CLUSTER SLOTS first, is denied, and falls back to a
// standalone client). It checks that Redis denied the user nothing else,
// that the permission probe of New sees the rule (one command less and New
// fails naming it), and that the user is confined to the prefix.
func TestACLStandalone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := redistest.Owned(t)
	setACLUser(t, ctx, srv, aclRules)
	newRC := func() rueidis.Client { return redistest.Client(t, srv, userOption) }

	a, b := aclClients(t, newRC)
	aclWorkload(t, ctx, redistest.Client(t, srv), a, b)
	// On Redis 7.2 and later rueidis's CLIENT SETINFO is denied too (it
	// ignores the refusal; see the README).
	checkNoDenials(t, ctx, srv, "command cluster|slots", "command client|setinfo")

	rc := newRC()
	checkConfined(t, ctx, rc)

	// The probe of New reads the rule: without ZSCORE, New fails naming it.
	setACLUser(t, ctx, srv, withoutRule(t, aclRules, "+zscore"))
	c, err := rlock.New(newRC())
	if c != nil {
		_ = c.Close()
	}
	if !errors.Is(err, rlock.ErrPermission) || !strings.Contains(err.Error(), "ZSCORE") {
		t.Errorf("New as a user without ZSCORE: %v, want ErrPermission naming ZSCORE", err)
	}
}

// TestACLWithoutClientCache: a rueidis client with DisableCache needs no
// CLIENT TRACKING, and one with the cache on cannot connect without it.
func TestACLWithoutClientCache(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := redistest.Owned(t)
	setACLUser(t, ctx, srv, withoutRule(t, aclRules, aclCacheRule))

	rc, err := srv.Client(userOption)
	if err == nil {
		rc.Close()
	}
	if !errors.Is(err, rueidis.ErrNoCache) {
		t.Fatalf("rueidis.NewClient with the cache on, without %s: %v, want an error matching rueidis.ErrNoCache", aclCacheRule, err)
	}
	if _, err := srv.Do(ctx, "ACL", "LOG", "RESET"); err != nil { // that denial
		t.Fatal(err)
	}

	newRC := func() rueidis.Client {
		return redistest.Client(t, srv, userOption, func(o *rueidis.ClientOption) { o.DisableCache = true })
	}
	a, b := aclClients(t, newRC)
	aclWorkload(t, ctx, redistest.Client(t, srv), a, b)
	checkNoDenials(t, ctx, srv, "command cluster|slots", "command client|setinfo")
}

// TestACLCluster runs every lock kind under the README's cluster rule on a
// one-node Redis Cluster, through cluster clients with sharded pub/sub forced
// (the README's advice: the user may not run INFO, from which ShardingAuto
// would learn the server's version). Without it, New fails naming the classic
// pub/sub commands that the rule leaves out.
func TestACLCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := singleNodeCluster(t, ctx)
	setACLUser(t, ctx, srv, aclClusterRules)
	newRC := func() rueidis.Client { return redistest.Client(t, srv, userOption) }

	c, err := rlock.New(newRC())
	if c != nil {
		_ = c.Close()
	}
	if !errors.Is(err, rlock.ErrPermission) || !strings.Contains(err.Error(), "PUBLISH") {
		t.Errorf("New on the cluster rule without forced sharding: %v, want ErrPermission naming PUBLISH", err)
	}
	// That New was denied INFO: start the log afresh.
	if _, err := srv.Do(ctx, "ACL", "LOG", "RESET"); err != nil {
		t.Fatal(err)
	}

	a, b := aclClients(t, newRC, rlock.WithPubSub(pubsub.WithSharding(pubsub.ShardingSharded)))
	aclWorkload(t, ctx, redistest.Client(t, srv), a, b)
	checkNoDenials(t, ctx, srv, "command client|setinfo")
	checkConfined(t, ctx, newRC())
}

// TestACLSentinel runs every lock kind under the README's rule plus the
// Sentinel and replica-acknowledgement additions, set on the master and its
// replica (ACL rules are not replicated), through a rueidis Sentinel client
// and WithReplicaAck.
func TestACLSentinel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := redistest.NewSentinelGroup(t)
	for _, srv := range g.Servers {
		setACLUser(t, ctx, srv, aclRules, aclSentinelRule, aclReplicaAckRule)
	}
	newRC := func() rueidis.Client {
		return redistest.SentinelClient(t, g, func(o *rueidis.ClientOption) {
			o.Username, o.Password = aclUserName, aclPassword // the data nodes'; Sentinels take o.Sentinel's
		})
	}
	a, b := aclClients(t, newRC, rlock.WithReplicaAck(1, 5*time.Second))
	aclWorkload(t, ctx, redistest.SentinelClient(t, g), a, b)
	for _, srv := range g.Servers {
		checkNoDenials(t, ctx, srv, "command client|setinfo")
	}
	checkConfined(t, ctx, newRC())
}

// TestACLPitfalls backs the README's pitfalls with ACL DRYRUN and real
// listings: key and channel patterns without the ":{" match other prefixes
// that start the same (the quorum locks' "rlock-quorum", a nested
// "rlock:eu"), and category rules grant what the README's rule does not:
// FLUSHALL, and KEYS, SCAN and PUBSUB CHANNELS, which list other tenants'
// lock names whatever the patterns.
func TestACLPitfalls(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := redistest.Owned(t)
	admin := redistest.Client(t, srv)

	// Another tenant, prefix "billing": a lock held and a waiter subscribed
	// for it.
	billing := make([]*rlock.Client, 2)
	for i := range billing {
		c, err := rlock.New(redistest.Client(t, srv), rlock.WithKeyPrefix("billing"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		billing[i] = c
	}
	held, err := billing[0].Mutex("invoice-7").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := lockAsync(ctx, billing[1].Mutex("invoice-7"))
	eventually(t, 10*time.Second, "the billing waiter never queued", func() bool {
		n, err := admin.Do(ctx, admin.B().Zcard().Key("billing:{invoice-7}:queue").Build()).AsInt64()
		return err == nil && n > 0
	})
	defer func() {
		if err := billing[0].Mutex("invoice-7").Unlock(held); err != nil {
			t.Error(err)
		}
		if r := <-waiting; r.err != nil {
			t.Error(r.err)
		} else if err := billing[1].Mutex("invoice-7").Unlock(r.lc); err != nil {
			t.Error(err)
		}
	}()

	user := func(name, rules string) {
		t.Helper()
		args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">pw", "resetchannels"}, strings.Fields(rules)...)
		if _, err := srv.Do(ctx, args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	allowed := func(name string, cmd ...string) bool {
		t.Helper()
		msg, err := srv.Do(ctx, append([]string{"ACL", "DRYRUN", name}, cmd...)...)
		if err != nil {
			t.Fatalf("ACL DRYRUN %s %v: %v", name, cmd, err)
		}
		s, _ := msg.ToString()
		return s == "OK"
	}
	setACLUser(t, ctx, srv, aclRules)
	user("nocolon", "~rlock* &rlock* +get +publish")
	user("nobrace", "~rlock:* &rlock:* +get +publish")
	user("all", "~rlock:{* &rlock:{* +@all")
	user("pubsub", "~rlock:{* &rlock:{* +@pubsub")
	user("read", "~rlock:{* &rlock:{* +@read")

	for _, tc := range []struct {
		user string
		cmd  []string
	}{
		{"nocolon", []string{"GET", "rlock-quorum:{x}"}},
		{"nocolon", []string{"PUBLISH", "rlock-quorum:{x}:unlock", "m"}},
		{"nobrace", []string{"GET", "rlock:eu:{x}"}},
		{"nobrace", []string{"PUBLISH", "rlock:eu:{x}:unlock", "m"}},
		{"all", []string{"FLUSHALL"}},
		{"all", []string{"PUBSUB", "CHANNELS"}},
		{"pubsub", []string{"PUBSUB", "CHANNELS"}},
		{"read", []string{"KEYS", "*"}},
		{"read", []string{"SCAN", "0"}},
	} {
		if !allowed(tc.user, tc.cmd...) {
			t.Errorf("user %s may not run %v: the pitfall is gone, fix the README", tc.user, tc.cmd)
		}
		if allowed(aclUserName, tc.cmd...) {
			t.Errorf("the README's user may run %v", tc.cmd)
		}
	}

	// What the listings show: the other tenant's lock name.
	as := func(name string) rueidis.Client {
		return redistest.Client(t, srv, func(o *rueidis.ClientOption) {
			o.Username, o.Password, o.DisableCache = name, "pw", true
		})
	}
	pubsubUser, readUser := as("pubsub"), as("read")
	channels, err := pubsubUser.Do(ctx, pubsubUser.B().PubsubChannels().Build()).AsStrSlice()
	if err != nil || !slices.ContainsFunc(channels, func(c string) bool { return strings.HasPrefix(c, "billing:{invoice-7}") }) {
		t.Errorf("PUBSUB CHANNELS as a +@pubsub user = %q, %v; want the billing waiter's channel", channels, err)
	}
	keys, err := readUser.Do(ctx, readUser.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil || !slices.Contains(keys, "billing:{invoice-7}") {
		t.Errorf("KEYS * as a +@read user = %q, %v; want the billing lock's key", keys, err)
	}
}
