package measure

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Requests counts the commands a lock's clients send to Redis, by command
// name: what crosses the network, as opposed to INFO commandstats, which also
// counts every command a Lua script runs inside Redis. A script call counts
// once (EVALSHA, plus EVAL after a NOSCRIPT reply). Connection handshakes
// (HELLO, CLIENT SETINFO, CLIENT TRACKING) are not counted: they are not the
// lock's doing, and happen once per connection.
//
// The zero value is ready to use.
type Requests struct {
	total  atomic.Int64
	mu     sync.Mutex
	byName map[string]*atomic.Int64
}

// Add counts one command called name. rueidis recycles a command once it is
// sent, so wrappers take the name before handing the command over.
func (r *Requests) Add(name string) {
	name = strings.ToUpper(name)
	r.mu.Lock()
	n := r.byName[name]
	if n == nil {
		if r.byName == nil {
			r.byName = map[string]*atomic.Int64{}
		}
		n = new(atomic.Int64)
		r.byName[name] = n
	}
	r.mu.Unlock()
	n.Add(1)
	r.total.Add(1)
}

// AddCmd counts one command given as its words.
func (r *Requests) AddCmd(cmd []string) {
	if len(cmd) == 0 {
		r.Add("?")
		return
	}
	r.Add(cmd[0])
}

// Total is the number of commands counted so far.
func (r *Requests) Total() int64 { return r.total.Load() }

// Snapshot returns the counts so far by upper-case command name.
func (r *Requests) Snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int64, len(r.byName))
	for _, k := range slices.Sorted(maps.Keys(r.byName)) {
		m[k] = r.byName[k].Load()
	}
	return m
}
