package core

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/internal/redistest"
)

// renewEnv is a private server, a raw client on it and a key prefix, for the
// tests of the renewal scripts below.
type renewEnv struct {
	t      *testing.T
	ctx    context.Context
	srv    *redistest.Server
	rc     rueidis.Client
	prefix string
}

func newRenewEnv(t *testing.T) *renewEnv {
	t.Helper()
	srv := redistest.Owned(t) // CONFIG SET maxmemory: a server of its own
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &renewEnv{t: t, ctx: ctx, srv: srv, rc: redistest.Client(t, srv), prefix: redistest.KeyPrefix(t)}
}

// do runs a raw command, failing the test on error.
func (e *renewEnv) do(args ...string) rueidis.RedisResult {
	e.t.Helper()
	r := e.rc.Do(e.ctx, e.rc.B().Arbitrary(args...).Build())
	if err := r.Error(); err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
	return r
}

// now is the server clock in milliseconds.
func (e *renewEnv) now() int64 {
	e.t.Helper()
	tm, err := e.rc.Do(e.ctx, e.rc.B().Time().Build()).AsStrSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	s, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return s*1000 + us/1000
}

func (e *renewEnv) int(args ...string) int64 {
	e.t.Helper()
	n, err := e.do(args...).AsInt64()
	if err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
	return n
}

func (e *renewEnv) score(key, member string) float64 {
	e.t.Helper()
	f, err := e.rc.Do(e.ctx, e.rc.B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	if err != nil {
		e.t.Fatalf("ZSCORE %s %s: %v", key, member, err)
	}
	return f
}

// snapshot is all a key is: its type, its value (DUMP) and its expiry.
func (e *renewEnv) snapshot(key string) string {
	e.t.Helper()
	typ, _ := e.do("TYPE", key).ToString()
	dump, _ := e.do("DUMP", key).ToString()
	return typ + "|" + dump + "|" + strconv.FormatInt(e.int("PEXPIRETIME", key), 10)
}

// run sends a renewal script by EVAL and returns its per-hold reply.
func (e *renewEnv) run(p *lua.Pipelined, keys, args []string) ([]int64, error) {
	return e.rc.Do(e.ctx, p.Eval(e.rc.B(), keys, args)).AsIntSlice()
}

func ms(n int64) string { return strconv.FormatInt(n, 10) }

// mutexHold writes a Mutex-shaped hold of owner o on key, for lease ms.
func (e *renewEnv) mutexHold(key string, lease int64) {
	e.do("HSET", key, "o", "1", "t", "7")
	e.do("PEXPIRE", key, ms(lease))
}

// readHold writes an RWMutex read hold of owner o (see rw_lib.lua) on base,
// its lease ending at end (a claim's when claimed), and returns its keys as
// rw_renew.lua takes them.
func (e *renewEnv) readHold(base string, end int64, claimed bool) []string {
	readers, counts, fence := base+":r", base+":r:n", base+":fence"
	score := ms(end)
	if claimed {
		score = ms(end-1) + ".5"
	}
	e.do("ZADD", readers, score, "o")
	e.do("PEXPIREAT", readers, ms(end+1))
	e.do("HSET", counts, "o", "1")
	e.do("PEXPIREAT", counts, ms(end+1))
	e.do("SET", fence, "123", "PXAT", ms(end+1000))
	return []string{readers, counts, fence}
}

// permitHold writes a semaphore permit o (see sem_lib.lua) on base, its lease
// ending at end (a claim's when claimed), and returns its keys as
// sem_renew.lua takes them.
func (e *renewEnv) permitHold(base string, end int64, claimed bool) []string {
	permits, counts, state := base+":permits", base+":counts", base
	score := ms(end)
	if claimed {
		score = ms(end-1) + ".5"
	}
	e.do("ZADD", permits, score, "o")
	e.do("HSET", counts, "o", "1")
	e.do("HSET", state, "limit", "2", "used", "1", "pexp", ms(end+1001))
	e.do("PEXPIREAT", permits, ms(end+1001))
	e.do("PEXPIREAT", counts, ms(end+1001))
	return []string{permits, counts, state}
}

// wrong replaces key with a string of someone else's, for a minute.
func (e *renewEnv) wrong(key string) {
	e.do("DEL", key)
	e.do("SET", key, "not-ours", "PX", "60000")
}

// A key of the wrong type fails the renewal of its own hold, answered -1 with
// nothing of that hold changed, and no other: the holds of the batch before
// and after it are renewed (1), one that is gone is reported so (0). (Each
// script failed the whole batch with WRONGTYPE, renewing none.)
func TestRenewScriptsWrongTypeFailsOnlyItsHold(t *testing.T) {
	e := newRenewEnv(t)
	const lease = 10000
	t.Run("mutex", func(t *testing.T) {
		e.t = t
		k := func(n string) string { return e.prefix + "{m" + n + "}" }
		e.mutexHold(k("1"), 5000)
		e.mutexHold(k("2"), 5000)
		e.wrong(k("2"))
		e.mutexHold(k("4"), 5000)
		before := e.snapshot(k("2"))
		got, err := e.run(lua.Renew, []string{k("1"), k("2"), k("3"), k("4")}, []string{ms(lease), "o", "o", "o", "o"})
		if err != nil {
			t.Fatalf("renew.lua failed the batch: %v", err)
		}
		if want := []int64{1, -1, 0, 1}; !slices.Equal(got, want) {
			t.Fatalf("renew.lua answered %v, want %v", got, want)
		}
		if after := e.snapshot(k("2")); after != before {
			t.Errorf("the wrong-typed key changed: %q, was %q", after, before)
		}
		for _, key := range []string{k("1"), k("4")} {
			if pttl := e.int("PTTL", key); pttl <= 5000 {
				t.Errorf("%s not renewed: PTTL %dms", key, pttl)
			}
		}
	})
	// A kind leased in a zset: hold makes a hold's keys (its zset first);
	// the second and fourth holds of the batch are broken, each by the key
	// of index broken[i] given the wrong type; an intact hold's key of index
	// kept must expire at least past ms after the new lease.
	type brokenHold struct {
		name string
		key  int
	}
	zsetKind := func(name string, script *lua.Pipelined, tag string, hold func(string, int64, bool) []string,
		broken [2]brokenHold, kept int, past int64, what string) {
		t.Run(name, func(t *testing.T) {
			e.t = t
			now := e.now()
			var keys []string
			holds := map[string][]string{}
			names := []string{"ok1", broken[0].name, "gone", broken[1].name, "ok2"}
			wrong := map[string]int{broken[0].name: broken[0].key, broken[1].name: broken[1].key}
			for _, n := range names {
				holds[n] = hold(e.prefix+"{"+tag+n+"}", now+5000, false)
				keys = append(keys, holds[n]...)
			}
			e.do("ZREM", holds["gone"][0], "o")
			var before []string
			for _, n := range names {
				if i, ok := wrong[n]; ok {
					e.wrong(holds[n][i])
					for _, key := range holds[n] {
						before = append(before, e.snapshot(key))
					}
				}
			}
			got, err := e.run(script, keys, []string{ms(lease), "o", "o", "o", "o", "o"})
			if err != nil {
				t.Fatalf("%s failed the batch: %v", name, err)
			}
			if want := []int64{1, -1, 0, -1, 1}; !slices.Equal(got, want) {
				t.Fatalf("%s answered %v, want %v", name, got, want)
			}
			i := 0
			for _, n := range names {
				if _, ok := wrong[n]; ok {
					for _, key := range holds[n] {
						if after := e.snapshot(key); after != before[i] {
							t.Errorf("hold %q: %s changed: %q, was %q", n, key, after, before[i])
						}
						i++
					}
				}
			}
			for _, n := range []string{"ok1", "ok2"} {
				if s := e.score(holds[n][0], "o"); s < float64(now+lease) {
					t.Errorf("hold %q not renewed: score %v, want %d at least", n, s, now+lease)
				}
				if exp := e.int("PEXPIRETIME", holds[n][kept]); exp < now+lease+past {
					t.Errorf("hold %q: %s expires at %d, want %d at least", n, what, exp, now+lease+past)
				}
			}
		})
	}
	zsetKind("rw_renew.lua", lua.RWRenew, "r", e.readHold, [2]brokenHold{{"readers", 0}, {"counts", 1}}, 2, 1000, "its fencing counter")
	zsetKind("sem_renew.lua", lua.SemRenew, "s", e.permitHold, [2]brokenHold{{"permits", 0}, {"state", 2}}, 0, 1, "its permits zset")
}

// Over maxmemory with noeviction, Redis refuses a script's first write when
// it may add data (ZADD, HSET), and lets every write after a first one that
// may not (PEXPIRE) go: the renewals of read holds and permits, as of Mutex
// holds, go on, and so do the extensions of claims, which the same scripts
// make. (rw_renew.lua and sem_renew.lua began with ZADD XX: every renewal
// was refused, and the holds were lost.)
func TestRenewScriptsRenewOverMaxmemory(t *testing.T) {
	e := newRenewEnv(t)
	const lease = 10000
	now := e.now()
	end := now + 3000
	mutex := e.prefix + "{m}"
	e.mutexHold(mutex, 3000)
	var rwKeys, semKeys []string
	for _, n := range []string{"lease", "claim"} {
		rwKeys = append(rwKeys, e.readHold(e.prefix+"{r"+n+"}", end, n == "claim")...)
		semKeys = append(semKeys, e.permitHold(e.prefix+"{s"+n+"}", end, n == "claim")...)
	}
	// The read holds' zsets expire past a longer lease of another reader:
	// no renewal raises their expiry, and its first write is still no ZADD.
	e.do("ZADD", rwKeys[0], ms(now+60000), "other")
	e.do("PEXPIREAT", rwKeys[0], ms(now+60001))
	e.do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	e.do("CONFIG", "SET", "maxmemory", "1")
	t.Cleanup(func() {
		_, _ = e.srv.Do(context.Background(), "CONFIG", "SET", "maxmemory", "0")
	})
	if err := e.rc.Do(e.ctx, e.rc.B().Set().Key(e.prefix+"probe").Value("x").Build()).Error(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("Redis is not over maxmemory: SET answered %v", err)
	}
	for _, c := range []struct {
		name   string
		script *lua.Pipelined
		keys   []string
		holds  int
	}{
		{"renew.lua", lua.Renew, []string{mutex}, 1},
		{"rw_renew.lua", lua.RWRenew, rwKeys, 2},
		{"sem_renew.lua", lua.SemRenew, semKeys, 2},
	} {
		args := []string{ms(lease)}
		want := []int64{}
		for range c.holds {
			args = append(args, "o")
			want = append(want, 1)
		}
		got, err := e.run(c.script, c.keys, args)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s over maxmemory: %v, %v; want %v", c.name, got, err, want)
		}
	}
	if pttl := e.int("PTTL", mutex); pttl <= 3000 {
		t.Errorf("the Mutex hold was not renewed: PTTL %dms", pttl)
	}
	for i, key := range []string{rwKeys[0], rwKeys[3], semKeys[0], semKeys[3]} {
		s := e.score(key, "o")
		if s < float64(now+lease) || s != float64(int64(s)) {
			t.Errorf("%s (claim: %v) not renewed to a whole lease: score %v, want %d at least", key, i%2 == 1, s, now+lease)
		}
		if exp := e.int("PEXPIRETIME", key); exp <= int64(s) {
			t.Errorf("%s expires at %d, before the lease it carries (%v)", key, exp, s)
		}
	}
}

// The watchdog renews the holds of a batch in which one hold's key has the
// wrong type: that hold alone fails, and is tried again and left to its
// expiry timer like any hold whose renewals fail, not ended at once as one
// found gone; the key is left as it is. (The whole batch failed, and every
// hold of the Client was lost.)
func TestWatchdogRenewsBesideAWrongTypedHold(t *testing.T) {
	e := newRenewEnv(t)
	const lease = 900 * time.Millisecond
	c, err := NewClient(redistest.Client(t, e.srv), Config{WatchdogTimeout: lease, UnlockTimeout: 5 * time.Second, NoExpiryPoll: time.Second, KeyPrefix: "wrongtype"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kind := &Kind{Name: "mutex", Script: lua.Renew, Args: func(holds []*Hold, lease time.Duration) ([]string, []string) {
		keys, args := []string{}, []string{ms(lease.Milliseconds())}
		for _, h := range holds {
			keys, args = append(keys, h.Key()), append(args, h.Owner())
		}
		return keys, args
	}}
	hold := func(key string) (*Hold, context.Context) {
		t.Helper()
		sent := c.NewTicket()
		e.mutexHold(key, lease.Milliseconds())
		ctx, cancel := context.WithCancelCause(context.Background())
		h := c.NewHold(HoldSpec{Kind: kind, Name: key, Key: key, Owner: "o", Lease: lease, Renew: true, Ctx: ctx, Cancel: cancel})
		c.Register(h)
		h.Start(sent)
		return h, ctx
	}
	intactKey, victimKey := e.prefix+"{intact}", e.prefix+"{victim}"
	intact, intactCtx := hold(intactKey)
	victim, victimCtx := hold(victimKey)
	e.wrong(victimKey)
	valid := victim.ValidUntil()
	select {
	case <-victimCtx.Done():
	case <-time.After(5 * lease):
		t.Fatal("the hold whose key someone replaced was never ended")
	}
	if ended := time.Now(); ended.Before(valid) {
		t.Errorf("the hold whose key has the wrong type ended %v before its confirmed lease ran out: taken for gone", valid.Sub(ended))
	}
	if !errors.Is(context.Cause(victimCtx), ErrLeaseLost) {
		t.Errorf("the hold ended with %v, want ErrLeaseLost", context.Cause(victimCtx))
	}
	// Had its renewals failed with the victim's, the intact hold's lease
	// (renewed last with the victim's) would now be running out, in Redis
	// too; renewed each third of it, it lasts.
	select {
	case <-intactCtx.Done():
		t.Fatalf("the intact hold was lost with the other: %v", context.Cause(intactCtx))
	case <-time.After(lease / 3):
	}
	if ended, cause := intact.State(); ended {
		t.Fatalf("the intact hold ended: %v", cause)
	}
	if pttl := e.int("PTTL", intactKey); pttl < lease.Milliseconds()/3 {
		t.Errorf("the intact hold is not renewed: PTTL %dms", pttl)
	}
	if typ, _ := e.do("TYPE", victimKey).ToString(); typ != "string" || e.int("PTTL", victimKey) < 50000 {
		t.Errorf("the wrong-typed key was changed: type %s, PTTL %dms", typ, e.int("PTTL", victimKey))
	}
}
