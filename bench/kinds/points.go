package main

import (
	"math/rand/v2"
	"time"
)

// point is one workload, run by each of its contenders in every round.
type point struct {
	name    string
	title   string // what the table header says
	servers int    // independent redis-servers it needs
	clients int    // Clients (own connections each), all in this process
	perC    int    // goroutines per Client
	hold    time.Duration
	// next draws a goroutine's next operation.
	next func(r *rand.Rand) op
	// contenders, the first being the library's kind under test; the rest
	// are its baselines and peers.
	contenders []contender
}

// op is one acquisition: the locks it needs (indexes into the point's lock
// names, sorted and distinct) and whether it only reads.
type op struct {
	locks []int
	read  bool
}

const (
	rwReadShare = 0.9
	multiPool   = 8 // locks the multi point draws its sets from
	multiSet    = 3 // locks per MultiLock acquisition
)

func pointByName(name string) point {
	switch name {
	case "rw":
		return point{
			name: "rw", servers: 1, clients: 8, perC: 2, hold: time.Millisecond,
			title: "rw: one lock, 90% reads, hold 1ms, 8 Clients x 2 goroutines in one process",
			next: func(r *rand.Rand) op {
				return op{locks: []int{0}, read: r.Float64() < rwReadShare}
			},
			contenders: []contender{rwMutex(), rlockExclusive(false), spinExclusive(), redsyncExclusive(1, time.Millisecond)},
		}
	case "fifo":
		return point{
			name: "fifo", servers: 1, clients: 4, perC: 4, hold: time.Millisecond,
			title: "fifo: one lock, hold 1ms, 4 Clients x 4 goroutines in one process",
			next:  func(*rand.Rand) op { return op{locks: []int{0}} },
			contenders: []contender{rlockExclusive(true), rlockExclusive(false), spinExclusive(),
				redsyncExclusive(1, time.Millisecond)},
		}
	case "multi":
		return point{
			name: "multi", servers: 1, clients: 8, perC: 2, hold: time.Millisecond,
			title: "multi: sets of 3 of 8 locks drawn at random, hold 1ms, 8 Clients x 2 goroutines in one process",
			next: func(r *rand.Rand) op {
				set := r.Perm(multiPool)[:multiSet]
				sortInts(set)
				return op{locks: set}
			},
			contenders: []contender{multiLock(), spinExclusive(), redsyncExclusive(1, time.Millisecond)},
		}
	case "quorum":
		return point{
			name: "quorum", servers: 5, clients: 4, perC: 2, hold: time.Millisecond,
			title: "quorum: one lock on 5 independent masters, hold 1ms, 4 Clients x 2 goroutines in one process",
			next:  func(*rand.Rand) op { return op{locks: []int{0}} },
			contenders: []contender{quorumMutex(), redsyncExclusive(5, time.Millisecond),
				redsyncExclusive(5, 0)},
		}
	}
	panic("unknown point " + name) // names are checked before
}

func sortInts(xs []int) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}
