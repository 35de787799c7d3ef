package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// InspectMax bounds the holders and waiters one inspection reports.
const InspectMax = 1000

// Waiter is one place in a queue as an inspection reads it; rlock.Waiter has
// the same fields (and their documentation) and converts from it.
type Waiter struct {
	Owner    string
	ClientID string
	Mode     string
	Permits  int64
	Waited   time.Duration
	LapsesIn time.Duration
}

// Holder is one holder as an inspection reads it; rlock.Holder has the same
// fields (and their documentation) and converts from it.
type Holder struct {
	Owner     string
	ClientID  string
	Count     int64
	Token     uint64
	LeaseLeft time.Duration
	Claim     bool
}

// ClientOf is the Client id of an owner field or permit id: the part before
// its last ':' (see Client.NewID); the whole string when it has none.
func ClientOf(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i > 0 {
		return owner[:i]
	}
	return owner
}

// A clock reading below this (2001-09-09 in µs) is not a clock reading: an
// arrival number counted from 1 by an older version of the scripts.
const minClockUS = 1_000_000_000_000_000

// Int parses a decimal string of a script reply.
func Int(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64) // a score Redis printed as a float
		if ferr != nil {
			return 0, fmt.Errorf("unexpected number %q in an inspection reply", s)
		}
		n = int64(f)
	}
	return n, nil
}

// ParseWaiters reads the waiters of an inspection reply (5 items each, see
// inspect.lua); nowUS is the server clock in microseconds. The fifth item is
// the mode ('r', 'w') or the permits asked, per kind.
func ParseWaiters(nowUS int64, items []string) ([]Waiter, error) {
	if len(items)%5 != 0 {
		return nil, fmt.Errorf("unexpected waiter list of %d items", len(items))
	}
	ws := make([]Waiter, 0, len(items)/5)
	for i := 0; i < len(items); i += 5 {
		w := Waiter{Owner: items[i], ClientID: ClientOf(items[i]), Waited: -1, LapsesIn: -1}
		arrival, err := Int(items[i+1])
		if err != nil {
			return nil, err
		}
		if arrival >= minClockUS {
			w.Waited = max(time.Duration(nowUS-arrival)*time.Microsecond, 0)
		}
		if items[i+2] != "" {
			deadline, err := Int(items[i+2])
			if err != nil {
				return nil, err
			}
			w.LapsesIn = time.Duration(deadline*1000-nowUS) * time.Microsecond
		}
		switch x := items[i+4]; x {
		case "r":
			w.Mode = "read"
		case "w":
			w.Mode = "write"
		case "":
		default:
			if w.Permits, err = Int(x); err != nil {
				return nil, err
			}
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// ParseExpiring reads {owner, expiry (server ms), count, claim ('1' or
// '0'), ...} (readers of an RWMutex, permit holders of a semaphore, see
// inspect_leases in queue_inspect_lib.lua), each given token.
func ParseExpiring(nowUS int64, items []string, token uint64) ([]Holder, error) {
	if len(items)%4 != 0 {
		return nil, fmt.Errorf("unexpected holder list of %d items", len(items))
	}
	hs := make([]Holder, 0, len(items)/4)
	for i := 0; i < len(items); i += 4 {
		at, err := Int(items[i+1])
		if err != nil {
			return nil, err
		}
		n, err := Int(items[i+2])
		if err != nil {
			return nil, err
		}
		hs = append(hs, Holder{Owner: items[i], ClientID: ClientOf(items[i]), Count: n, Token: token,
			LeaseLeft: time.Duration(at*1000-nowUS) * time.Microsecond, Claim: items[i+3] == "1"})
	}
	return hs, nil
}

// LeaseOf turns a PTTL reply (ms; -1 no expiry, -2 no key) into a lease left.
func LeaseOf(pttl int64) time.Duration {
	if pttl < 0 {
		return -1
	}
	return time.Duration(pttl) * time.Millisecond
}

// InspectReply splits an inspection script's reply: its items as strings,
// and as lists where an item is an array (nil elsewhere). want is the number
// of items expected.
func InspectReply(res rueidis.RedisResult, want int) (strs []string, lists [][]string, err error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, nil, err
	}
	if len(arr) != want {
		return nil, nil, fmt.Errorf("unexpected inspection reply of %d items, want %d", len(arr), want)
	}
	strs, lists = make([]string, want), make([][]string, want)
	for i, m := range arr {
		if m.IsArray() {
			if lists[i], err = m.AsStrSlice(); err != nil {
				return nil, nil, err
			}
			continue
		}
		if strs[i], err = m.ToString(); err != nil {
			return nil, nil, err
		}
	}
	return strs, lists, nil
}
