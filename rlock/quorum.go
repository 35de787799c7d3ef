package rlock

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// Defaults and bounds of a Quorum.
const (
	// DefaultQuorumKeyPrefix is the key prefix of quorum locks unless
	// QuorumOptions.ClientOptions sets one with WithKeyPrefix. It differs
	// from DefaultKeyPrefix so that a quorum lock and a Mutex of the same name
	// never share keys.
	DefaultQuorumKeyPrefix = "rlock-quorum"
	// DefaultAttemptTimeout bounds one acquisition attempt on one master.
	DefaultAttemptTimeout = 100 * time.Millisecond
	// MinAttemptTimeout is the shortest QuorumOptions.AttemptTimeout accepted;
	// the longest is a third of the watchdog timeout, so that a lease is
	// always much longer than an attempt.
	MinAttemptTimeout = time.Millisecond
)

// Quorum is a set of N independent Redis masters on which quorum locks are
// taken, following the Redlock algorithm: a lock is held while a majority of
// the masters (N/2+1) hold it for the same owner. Create one with NewQuorum,
// get locks from it with Mutex, and Close it on shutdown.
//
// # What it is for, and what it does not promise
//
// A quorum lock survives the loss of a minority of its masters: with 5
// masters, 2 may crash or be cut off and the lock keeps working, where a
// Mutex on a single Redis (or on a primary with asynchronous replicas, which
// can lose a lock just taken on failover) cannot. That is its only advantage,
// and it comes with assumptions that a single Redis does not need:
//
//   - Bounded pauses and clock drift. The validity of a hold is measured on
//     the client's monotonic clock from the moment each acquisition was sent,
//     less the time the acquisition took and a drift margin (1% of the lease
//     plus 2ms), so it ends no later than the masters expire the keys, as long
//     as their clocks run at about the rate of the client's. A master whose
//     wall clock jumps forward (an NTP step, an administrator) expires the key
//     early, and a holder paused longer than its validity (GC, a stopped VM, a
//     slow network) runs on after its lease: either way two owners can believe
//     they hold the lock. This is Martin Kleppmann's critique of Redlock
//     ("How to do distributed locking", 2016); antirez's answer ("Is Redlock
//     safe?") accepts the assumptions and asks that clocks be slewed, not
//     stepped. A single Redis has the same pause problem but not the
//     multi-clock one.
//   - Masters that keep what they granted. A master that restarts without
//     persistence (or with fsync that lost the last second) forgets the locks
//     it granted: with 5 masters, an owner holding 3 of them loses its
//     majority in truth if one of its 3 restarts, and another owner can then
//     take the other 2 and the restarted one. A Quorum keeps a hold while a
//     majority of its masters still confirm it (a renewal that finds the key
//     gone drops that master), but it cannot know what a restarted master
//     granted meanwhile. Run the masters with appendfsync always, or keep a
//     restarted master out of service for one lease (the watchdog timeout, or
//     the longest WithLease) before it serves again, as the Redlock
//     description asks.
//   - No fencing token. A Mutex's token comes from one counter that orders
//     every acquisition of the lock. A quorum has N counters that no script
//     can read together: two owners can draw the same number from different
//     majorities, and a master that restarted empty starts again below the
//     numbers it issued. The largest of the majority's counters is a token
//     only while no master ever loses its counter, which is exactly the
//     failure a quorum is meant to survive; so a quorum lock offers none,
//     rather than one that looks safe and is not.
//
// Redisson, whose RedissonRedLock this is the counterpart of, has deprecated
// it for those reasons. Where two holders at once would corrupt data, prefer
// a Mutex on a single primary with its fencing token, checked by the
// resource: that stays safe through pauses, clock jumps and failovers. Use a
// quorum lock where what matters is that the lock keeps working through the
// loss of a master, and a rare second holder only costs duplicate work.
//
// # How it works
//
// Lock asks one master first, the gate (chosen from the lock's name, so
// that locks spread over the masters), and the others at once only when the
// gate granted it: contenders meet at the gate instead of splitting the
// masters' votes among them. A Lock that loses at the gate keeps its place in
// line there, so that a free lock goes to the caller that has waited longest,
// not to a holder that releases and asks again. Each attempt is bounded by
// the attempt timeout (QuorumOptions.AttemptTimeout); a gate that does not
// answer is passed over, by every lock of the Quorum, for a second. When a
// majority granted the lock and validity is left, the lock is held. A round
// that took the gate but found other masters held asks them again for up to
// the attempt timeout (their holder is most often the last one, whose
// releases are still on their way). Otherwise everything the attempt took
// is given back at once (also on masters whose reply was lost: a tombstone
// refuses an attempt that runs late) and Lock waits. It waits on each
// master's unlock channel; after a loss at the gate, for the gate's release,
// or for another master's if the gate then stays silent for an attempt
// timeout (it may have died). A release wakes it, bounded by the time the
// holder it saw keeps its lease, so a lost message costs at most that. A
// gate holder that no round saw hold a majority (one that may have vanished
// between the gate and the others) is waited for five attempt timeouts,
// then Lock asks every master at once. After a split vote (no one got a
// majority, as when Quorums in other processes list the masters in another
// order and so meet at another gate) it retries after a short random delay,
// so that contenders fall out of step. TryLock makes one round on every
// master at once, out of line.
// A hold taken without WithLease is renewed on every master by the watchdog
// of that master's Client; its lock context is cancelled with ErrLeaseLost
// once fewer than a majority of its masters confirm it (a renewal found the
// key gone, or renewals failed until the last confirmed lease ran out), and
// the masters it still holds are then released. Unlock releases the lock on
// every master it was taken on.
//
// # Replica acknowledgement
//
// The masters of a quorum may each have replicas (with Sentinel, say). With
// WithReplicaAck(n, timeout) in QuorumOptions.ClientOptions, each master's
// vote is followed by WAIT n timeout on the same connection, and a vote counts
// only when at least n replicas of that master acknowledged it: a vote that
// too few acknowledged in time counts against the lock, like a master that
// did not answer, and is given back (whether the round wins or not). So a
// lock Lock returned is held by a majority of the masters and, on each of
// them, by n of its replicas: a failover of one of those masters that
// promotes such a replica keeps its vote. The attempt timeout bounds each
// vote's script and the acknowledgement timeout its WAIT; the time both take
// comes off the validity, as any round's time does.
//
// A round that would have won counting the unacknowledged votes fails Lock
// and TryLock with ErrNotReplicated (everything the round took given back),
// unless WithReplicaAckRetry is given: then a blocking Lock tries another
// round soon, while its ctx (and wait timeout) lasts. A round lost to other
// owners or to unreachable masters waits as usual. Re-entries are counted in
// the process and write nothing; renewals and releases are not waited for
// (see WithReplicaAck for what acknowledgement does not promise).
type Quorum struct {
	id      string    // owner fields of this Quorum's holds start with it
	masters []*Client // one per master, in the order given
	major   int       // N/2+1
	attempt time.Duration
	lease   time.Duration // the watchdog's lease
	unlock  time.Duration
	seq     atomic.Uint64 // see newOwner
	// gateDown[i]: until when (Unix ns) master i is passed over as a gate
	// (see quorum_gate.go).
	gateDown []atomic.Int64

	mu        sync.Mutex
	closed    chan struct{}
	calls     sync.WaitGroup
	closeOnce sync.Once
}

// QuorumOptions configure a Quorum (see NewQuorumWith).
type QuorumOptions struct {
	// ClientOptions configure the Client of each master (see New):
	// WithKeyPrefix (default DefaultQuorumKeyPrefix), WithWatchdogTimeout (the
	// lease of holds taken without WithLease), WithUnlockTimeout, WithPubSub,
	// WithProbe, WithReplicaAck and WithReplicaAckRetry (see Replica
	// acknowledgement in Quorum's documentation). Linger is always off:
	// quorum holds are not kept for the next Lock.
	ClientOptions []Option
	// AttemptTimeout bounds one acquisition attempt on one master: a master
	// that does not answer in time counts as a vote against. It should be
	// small next to the lease (it is subtracted from the validity). Default
	// DefaultAttemptTimeout (100ms), or a quarter of a shorter WithLease;
	// allowed MinAttemptTimeout (1ms) to a third of the watchdog timeout.
	AttemptTimeout time.Duration
}

// NewQuorum returns a Quorum over the given masters, one rueidis.Client per
// independent Redis master (not replicas of one another, not nodes of one
// cluster), with default options. See NewQuorumWith.
func NewQuorum(clients ...rueidis.Client) (*Quorum, error) {
	return NewQuorumWith(QuorumOptions{}, clients...)
}

// NewQuorumWith returns a Quorum over the given masters with options. Any
// number of masters from 1 is accepted; a lock needs N/2+1 of them, so an even
// number tolerates no more failures than the odd number below it (4 masters
// need 3 and tolerate 1 failure, as 3 masters do; 5 tolerate 2). Use 3 or 5.
//
// It fails with an error matching ErrInvalidOption when no client is given,
// one is nil, or the same client is given twice (two clients for one server
// cannot be told apart: do not), and with the errors of New for bad
// ClientOptions. Like New it probes each master's rights (concurrently); an
// unreachable master does not fail it. The caller still owns the clients and
// closes them after the Quorum.
func NewQuorumWith(opts QuorumOptions, clients ...rueidis.Client) (*Quorum, error) {
	if err := checkQuorumClients(clients); err != nil {
		return nil, err
	}
	copts := append([]Option{WithKeyPrefix(DefaultQuorumKeyPrefix)}, opts.ClientOptions...)
	copts = append(copts, WithLinger(0))
	cfg := defaultConfig()
	for _, o := range copts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	attempt := opts.AttemptTimeout
	if attempt == 0 {
		attempt = min(DefaultAttemptTimeout, cfg.watchdogTimeout/3)
	}
	if err := checkRange("AttemptTimeout", attempt, MinAttemptTimeout, cfg.watchdogTimeout/3); err != nil {
		return nil, err
	}
	masters := make([]*Client, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, rc := range clients {
		wg.Go(func() { masters[i], errs[i] = New(rc, copts...) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, c := range masters {
				if c != nil {
					_ = c.Close()
				}
			}
			return nil, fmt.Errorf("rlock: quorum master %d of %d: %w", i+1, len(clients), err)
		}
	}
	return &Quorum{
		id:       uuid.NewString(),
		masters:  masters,
		major:    len(clients)/2 + 1,
		attempt:  attempt,
		lease:    cfg.watchdogTimeout,
		unlock:   cfg.unlockTimeout,
		gateDown: make([]atomic.Int64, len(clients)),
		closed:   make(chan struct{}),
	}, nil
}

// checkQuorumClients refuses no clients, a nil one, and one given twice.
func checkQuorumClients(clients []rueidis.Client) error {
	if len(clients) == 0 {
		return fmt.Errorf("%w: a quorum needs at least one rueidis client (one per independent master)", ErrInvalidOption)
	}
	for i, rc := range clients {
		if rc == nil {
			return fmt.Errorf("%w: rueidis client %d of %d is nil", ErrInvalidOption, i+1, len(clients))
		}
		if !reflect.TypeOf(rc).Comparable() {
			continue
		}
		for j := range i {
			if reflect.TypeOf(clients[j]) == reflect.TypeOf(rc) && clients[j] == rc {
				return fmt.Errorf("%w: rueidis clients %d and %d are the same client: a quorum needs independent masters", ErrInvalidOption, j+1, i+1)
			}
		}
	}
	return nil
}

// Masters returns the number of masters N.
func (q *Quorum) Masters() int { return len(q.masters) }

// Majority returns the number of masters a lock needs: N/2+1.
func (q *Quorum) Majority() int { return q.major }

// Mutex returns the quorum lock called name. It is cheap: any number may
// exist. An invalid name is reported by every method, wrapped in
// ErrInvalidName.
func (q *Quorum) Mutex(name string) *QuorumMutex {
	m := q.masters[0].Mutex(name) // validates the name; keys are alike on every master
	return &QuorumMutex{q: q, name: name, err: m.err, keys: m.keys, gateFrom: gateStart(name, len(q.masters))}
}

// Close stops the watchdogs and multiplexers of every master's Client.
// Holds still open are not released (a goroutine may still be inside its
// critical section): they expire with their lease, and their lock contexts
// are cancelled with a cause matching ErrLeaseLost and ErrClosed. Waiting
// Lock calls return ErrClosed. Close is idempotent.
func (q *Quorum) Close() error {
	q.closeOnce.Do(func() {
		q.mu.Lock()
		close(q.closed)
		q.mu.Unlock()
		q.calls.Wait()
		var wg sync.WaitGroup
		for _, c := range q.masters {
			wg.Go(func() { _ = c.Close() })
		}
		wg.Wait()
	})
	return nil
}

func (q *Quorum) enter() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.isClosed() {
		return false
	}
	q.calls.Add(1)
	return true
}

func (q *Quorum) exit() { q.calls.Done() }

func (q *Quorum) isClosed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

// String describes the Quorum for logs.
func (q *Quorum) String() string {
	return fmt.Sprintf("rlock.Quorum(%d masters, majority %d)", len(q.masters), q.major)
}
