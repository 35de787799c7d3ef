package core

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/lua"
	"github.com/relockio/relock/internal/mux"
	"github.com/relockio/relock/pubsub"
)

// Config is what the machinery needs from the public options.
type Config struct {
	WatchdogTimeout time.Duration // lease of watchdog holds, renewed every third
	UnlockTimeout   time.Duration // bound on retried releases and clean-ups
	NoExpiryPoll    time.Duration // re-check interval for a key without expiry
	KeyPrefix       string
	// Linger is how long a contended hold, at its last release, is kept for
	// the Client's next acquisition (rlock.WithLinger); 0: never.
	Linger time.Duration
	// ReplicaAck is how many replicas must acknowledge an acquisition
	// (WAIT) before it counts (rlock.WithReplicaAck); 0: none.
	ReplicaAck        int
	ReplicaAckTimeout time.Duration
	// ReplicaAckRetry: an acquisition too few replicas acknowledged is
	// undone and tried again while the caller waits, instead of failing.
	ReplicaAckRetry bool
	// ClaimWindow is how long a lock handed to a queued waiter of this
	// Client is granted for in Redis until the Client extends it to the lease
	// (see claim.go).
	ClaimWindow time.Duration
	// Logger receives the Client's log lines (rlock.WithLogger); nil:
	// slog.Default() at the time of the line.
	Logger *slog.Logger
	// Observer is told of lock events (rlock.WithObserver); nil: none.
	Observer Observer
	// Functions: the scripts run as Redis functions where the server allows
	// it (rlock.WithRedisFunctions; see internal/lua/functions.go).
	Functions bool
}

// Client is one owner identity and its shared machinery.
type Client struct {
	RC rueidis.Client
	// Scripts runs the lock scripts on RC (as Redis functions where it can).
	Scripts *lua.Runner
	ID      string
	Cfg     Config
	Mux     *mux.Multiplexer

	seq atomic.Uint64
	// lost counts connection errors seen: every one of them may hide a
	// restart or a lost reply, so holds confirmed before it are unconfirmed.
	lost atomic.Uint64

	mu        sync.Mutex
	holds     map[*Hold]struct{}
	claims    map[*Hold]struct{} // holds awaiting their extension (see claim.go)
	claimWake chan struct{}      // tells the watchdog a claim was added
	watchdog  bool
	closed    chan struct{} // no new calls or holds
	sealed    bool          // no new background work
	closeOnce sync.Once
	calls     sync.WaitGroup // calls in flight (Enter/Exit)
	bg        sync.WaitGroup // background goroutines (Go, watchdog)

	bgCtx    context.Context // see BackgroundContext
	bgCancel context.CancelFunc

	lastRound atomic.Pointer[RenewRound] // see LastRenewRound
	slots     slotMap                    // a cluster's slots by node, for the watchdog

	// turns is the turn state of the Client's locks, by kind (see Turns).
	turns [turnTables]*Turns

	// Obs is Cfg.Observer, nil-checked on every event; Stats counts them.
	Obs   Observer
	Stats Counters
}

// CloseGrace is how long Close lets background clean-ups (see Go) run before
// it cancels BackgroundContext: long enough for scripts on a healthy Redis to
// finish, short enough that Close with Redis unreachable returns promptly.
const CloseGrace = 500 * time.Millisecond

// NewClient builds the machinery; cfg must already be valid.
func NewClient(rc rueidis.Client, cfg Config, pubsubOpts []pubsub.Option) (*Client, error) {
	m, err := mux.New(rc, pubsubOpts...)
	if err != nil {
		return nil, err
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	c := &Client{
		RC:        newBounded(rc),
		ID:        uuid.NewString(),
		Cfg:       cfg,
		Mux:       m,
		holds:     make(map[*Hold]struct{}),
		claimWake: make(chan struct{}, 1),
		closed:    make(chan struct{}),
		bgCtx:     bgCtx,
		bgCancel:  bgCancel,
		Obs:       cfg.Observer,
	}
	c.Scripts = lua.NewRunner(c.RC, cfg.Functions)
	for i := range c.turns {
		c.turns[i] = newTurns(c, cfg.Linger)
	}
	return c, nil
}

// Close stops the watchdog and the multiplexer, ends every hold with a cause
// matching ErrLeaseLost and ErrClosed and then frees it in Redis in the
// background (see endAndFree), and waits for calls in flight to return
// (waiting ones return ErrClosed). It then gives background work (see Go) up
// to CloseGrace to finish, cancels BackgroundContext, and waits for that work
// to return, so Close is prompt even when Redis is unreachable, as long as
// background work honours BackgroundContext (RC's commands do, even while
// rueidis dials, see bounded).
//
// Clean-ups cut short leave behind only what expires by itself: a Mutex or
// RWMutex waiter's place in a queue lapses max(its lease, 2s) after the
// re-check it planned (a semaphore waiter's within one watchdog timeout of
// its last re-check), a hold or permit whose release did not run, or an
// acquisition may have taken, expires with its lease (the watchdog no longer
// renews it), and a tombstone key with the lease it guards.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		c.mu.Unlock()
		// Kept locks and reserved places go back at once; none is made
		// from now on (see Turns.Park).
		for _, t := range c.turns {
			t.flush()
		}
		c.mu.Lock()
		holds := make([]*Hold, 0, len(c.holds))
		for h := range c.holds {
			holds = append(holds, h)
		}
		c.mu.Unlock()
		c.Mux.Close()
		for _, h := range holds {
			c.endAndFree(h)
		}
		// Waiters that leave now still get to give up their place in Redis.
		c.calls.Wait()
		c.mu.Lock()
		c.sealed = true
		c.mu.Unlock()
		done := make(chan struct{})
		go func() {
			c.bg.Wait()
			close(done)
		}()
		grace := time.NewTimer(CloseGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
		}
		c.bgCancel()
		<-done
	})
	c.bg.Wait()
}

// endAndFree ends h for Close, cancelling its lock context first, and then
// frees it in Redis in the background, as an Unlock would (the lock goes to
// the next waiter): other processes need not wait out its lease. The owner-
// checked abandon is idempotent and leaves a newer owner alone, so a release
// in flight racing it does no harm; it is bounded by the unlock timeout and
// cut short with the rest of the background work (see Close), leaving the
// hold to expire with its lease when Redis does not answer.
func (c *Client) endAndFree(h *Hold) {
	if h.end(fmt.Errorf("%w: %w", h.leaseLost(), Inner(ErrClosed))) {
		h.freeInBackground() // (else ended by something else, which answers for it)
	}
}

// Enter registers a call in flight, which Close waits for; it reports false
// after Close. Every successful Enter must be paired with Exit.
func (c *Client) Enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.IsClosed() {
		return false
	}
	c.calls.Add(1)
	return true
}

// Exit ends a call registered by Enter.
func (c *Client) Exit() { c.calls.Done() }

// IsClosed reports whether Close was called.
func (c *Client) IsClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// Go runs fn on a goroutine that Close waits for; it reports false (and does
// not run fn) once Close has seen every call return. Background work that
// talks to Redis should take its context from BackgroundContext (or use
// GoCtx), so that Close can cut it short.
func (c *Client) Go(fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		fn()
	}()
	return true
}

// GoCtx is Go for work that takes a context: fn gets BackgroundContext, which
// Close cancels after CloseGrace. A clean-up should derive its own deadline
// from it, for example
//
//	c.GoCtx(func(bg context.Context) {
//		ctx, cancel := context.WithTimeout(bg, c.Cfg.UnlockTimeout)
//		defer cancel()
//		_ = RetryTransient(ctx, op)
//	})
func (c *Client) GoCtx(fn func(ctx context.Context)) bool {
	return c.Go(func() { fn(c.bgCtx) })
}

// BackgroundContext is the parent context for background work of the Client
// (clean-ups started with Go or GoCtx, which outlive the call that started
// them). It is never cancelled before Close; Close cancels it once every call
// has returned and background work has had CloseGrace to finish, so work
// derived from it stops promptly when Redis is unreachable. Work cut short
// leaves in Redis only what expires by itself (see Close).
func (c *Client) BackgroundContext() context.Context { return c.bgCtx }

// NewID returns an id unique to this Client, for owner fields, permit ids and
// release requests.
func (c *Client) NewID() string {
	var buf [64]byte // a UUID, a colon and a uint64: one allocation, the string
	b := append(buf[:0], c.ID...)
	b = append(b, ':')
	return string(strconv.AppendUint(b, c.seq.Add(1), 10))
}

// Register adds h to the live holds, starting the watchdog on first use. It
// reports false after Close.
func (c *Client) Register(h *Hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.IsClosed() {
		return false
	}
	c.holds[h] = struct{}{}
	if !c.watchdog {
		c.watchdog = true
		c.bg.Add(1)
		go c.runWatchdog()
	}
	return true
}

// Holding reports whether a live hold of the Client, of kind k, is on key:
// what a call that finds the lock taken tells when the holder is this Client
// (through another lock context than the caller's).
func (c *Client) Holding(k *Kind, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.holds {
		if h.kind == k && h.key == key {
			return true
		}
	}
	return false
}

// HoldCount returns how many holds of the Client are live.
func (c *Client) HoldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.holds)
}

func (c *Client) unregister(h *Hold) {
	c.mu.Lock()
	delete(c.holds, h)
	delete(c.claims, h)
	c.mu.Unlock()
}

// Epoch changes whenever the Client sees a connection error: holds confirmed
// by a command sent in an earlier epoch may have been lost in Redis meanwhile.
func (c *Client) Epoch() uint64 { return c.lost.Load() }

// NoteError records a command error. One that is not a Redis reply (a dropped
// or stalled connection, a timeout) starts a new epoch: the command may have
// run, or Redis may have restarted, without the Client knowing.
func (c *Client) NoteError(err error) {
	if err == nil {
		return
	}
	if _, isRedis := rueidis.IsRedisErr(err); !isRedis {
		c.lost.Add(1)
	}
}

// PublishArg is how the scripts are to publish (see publish_lib.lua): the
// Multiplexer's PUBLISH or SPUBLISH, or, for classic pub/sub in a cluster,
// where PUBLISH's count of receivers covers one node only, "PUBLISH?", so that
// no script takes a waiter subscribed on another node for gone.
func (c *Client) PublishArg(ctx context.Context) string {
	cmd := c.Mux.PublishCommand(ctx)
	if cmd == "PUBLISH" && c.RC.Mode() == rueidis.ClientModeCluster {
		return "PUBLISH?"
	}
	return cmd
}

// UnlockContext is the context of a release or clean-up made for parent (a
// lock context, or a caller's): it ignores parent's cancellation (a release
// must run even once the lock context ended), lasts at most the unlock
// timeout, and ends when Close cuts background work short, so that a release
// running in the background (of a dropped lock context, say) never holds Close
// up for longer than its grace when Redis is unreachable.
func (c *Client) UnlockContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), c.Cfg.UnlockTimeout)
	stop := context.AfterFunc(c.bgCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
