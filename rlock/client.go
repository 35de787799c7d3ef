package rlock

import (
	"fmt"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
	"github.com/relockio/relock/pubsub"
)

// Client is one owner identity in Redis and the machinery its locks share: a
// pub/sub multiplexer for waiting, and a watchdog that renews leases. Create
// one per process (or per rueidis.Client) with New, share it between
// goroutines, and Close it on shutdown. Package semaphore builds on it too.
type Client struct {
	c    *core.Client
	t    *core.Turns // the Client's turns (see turns.go)
	fifo bool        // see WithFIFO
}

// New returns a Client using rc for commands and for dedicated pub/sub
// connections. The caller still owns rc and closes it after the Client.
//
// New makes one round trip, bounded by WithProbeTimeout (1s): a probe of the
// Redis user's rights (see WithProbe). (Two on a cluster client whose
// multiplexer decides between classic and sharded pub/sub by the server's
// version, pubsub.ShardingAuto: it asks first, as the first lock would.) It fails with an error matching
// ErrPermission, naming the commands, when the user may not run what the locks
// need; an unreachable Redis does not fail New.
func New(rc rueidis.Client, opts ...Option) (*Client, error) {
	if rc == nil {
		return nil, fmt.Errorf("%w: nil rueidis client", ErrInvalidOption)
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := core.NewClient(rc, cfg.core(), cfg.pubsubOpts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	// Options are all checked: only now ask Redis.
	if err := cfg.probeRights(c); err != nil {
		c.Close()
		return nil, err
	}
	return &Client{c: c, t: c.Turns(core.MutexTurns), fifo: cfg.fifo}, nil
}

// ID is the Client's owner identity, a random UUID. Hash fields of its holds
// start with it.
func (c *Client) ID() string {
	if c.c == nil {
		return ""
	}
	return c.c.ID
}

// Core returns the machinery behind c, which package semaphore builds on; nil
// for a nil or zero Client. It is for this module's packages only: its type
// is internal, no part of the API, and may change in any release.
func (c *Client) Core() *core.Client {
	if c == nil {
		return nil
	}
	return c.c
}

// PubSubStats returns the counts of the Client's pub/sub multiplexer, shared
// by its locks and semaphores: channels subscribed, Waiters, reconnections,
// and messages received. Cheap enough for metrics scraping.
func (c *Client) PubSubStats() pubsub.Stats {
	if c.c == nil {
		return pubsub.Stats{}
	}
	return pubsub.Stats(c.c.Mux.Stats())
}

// Mutex returns the reentrant lock called name. It is cheap: a Mutex is only
// a name bound to the Client, and any number may exist. An invalid name is
// reported by every method of the returned Mutex, wrapped in ErrInvalidName.
// With WithFIFO the Mutex is strictly fair, as FairMutex's.
func (c *Client) Mutex(name string) *Mutex {
	return c.mutex(name, c.fifo)
}

// FairMutex returns the lock called name in strict FIFO mode (Redisson's
// RFairLock): every Lock call that waits queues in Redis under its own owner
// id, and the lock is acquired in the order of that queue, which is the order
// in which the calls joined it, across every goroutine of every process. A
// call joins it when it starts to wait: the first attempt, which finds the
// lock taken, does not queue (a call whose Client already waits for the lock,
// or did a moment ago, skips that attempt), and the call subscribes to its
// wake-ups before it queues, so calls that found the lock taken within a
// round trip or so of each other may be served in either order.
//
// The price is the cohort's savings: the goroutines of this Client do not
// wait as a cohort, a hold is never passed to another goroutine of the Client
// without Redis, and its last Unlock never keeps the lock for the Client's
// next Lock (no turns, whatever WithLinger says), so every hold is a hand-off
// through Redis (one script and one message). What a FairMutex shares with a
// Mutex is everything else: the same lock in Redis (a Mutex and a FairMutex of
// one name exclude each other), pub/sub waits, direct hand-off, the watchdog,
// fencing tokens, re-entry.
//
// The order is strict among fair callers. A lock that cohorting Mutexes
// (Client.Mutex without WithFIFO) also use still gives each fair caller its
// own place in the Redis queue, but a cohorting Client passes the lock among
// its own goroutines within its turn before the next in the queue is served.
// As with any Mutex, a waiter whose process stops re-checking for two
// watchdog timeouts, or whose pub/sub connection is down when the lock reaches
// it, loses its place and queues again at the tail. TryLock takes the lock
// only when it is free and no one is queued.
func (c *Client) FairMutex(name string) *Mutex {
	return c.mutex(name, true)
}

func (c *Client) mutex(name string, fair bool) *Mutex {
	if c.c == nil {
		return &Mutex{name: name, fair: fair, err: errZero("Client", "New")}
	}
	return &Mutex{c: c.c, t: c.t, name: name, fair: fair, err: core.ValidateName(name, ErrInvalidName), keys: newKeys(c.c.Cfg.KeyPrefix, name, c.c.ID)}
}

// Close stops the watchdog and the multiplexer and frees the Client's holds,
// as etcd's Session.Close revokes its lease. Every hold still open (Mutex,
// RWMutex read and write holds, semaphore permits) first has its lock context
// cancelled, with a cause matching ErrLeaseLost and ErrClosed, and is then
// released in Redis by an owner-checked script that hands it to the next
// waiter, as Unlock would, so that other processes need not wait out its
// lease; a lock kept for this Client's next Lock (see WithLinger) is released
// too. A goroutine still inside a critical section learns of the end from its
// lock context. Waiting Lock calls return ErrClosed. Close is idempotent.
//
// Close returns promptly, even when Redis is unreachable: after the calls in
// flight have returned, the releases and other background clean-ups (waiters
// giving up their place in a queue, acquisitions of unknown outcome being
// undone) get a short grace (500ms, and at most the unlock timeout, see
// WithUnlockTimeout) and are then cancelled; Close does not wait on commands
// rueidis cannot cancel (a dial to a node that stopped answering). What a
// cut-short clean-up leaves in Redis expires by itself: a hold within its
// lease, a waiter's place in a lock's queue max(its lease, 2s) after the
// re-check it planned (at most 4/5 of a watchdog timeout away).
//
// Close sends commands on the rueidis client given to New (the releases
// above), so close the Client first and the rueidis client after it; with
// defers, defer rc.Close() before defer c.Close(). In the other order those
// commands fail, and what they would have removed stays in Redis until it
// expires as above: the holds block other processes until their leases run out.
func (c *Client) Close() error {
	if c.c == nil {
		return nil
	}
	c.c.Close() // it gives back what turns keep (see core.Turns)
	return nil
}
