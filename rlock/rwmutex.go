package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/core"
)

// RWMutex is a reentrant distributed reader/writer lock named by a string, in
// the style of Redisson's RReadWriteLock: any number of readers, or one
// writer. Get one from Client.RWMutex. Its keys in Redis are its own: a Mutex
// of the same name is another lock.
//
// As with Mutex, ownership travels in the context: RLock, TryRLock, Lock and
// TryLock return a lock context that carries the hold; pass it (or a context
// derived from it) to RUnlock or Unlock, and to RLock or Lock to re-enter.
// Both locks are reentrant: each level needs its own unlock. A context that
// holds the write lock may also take the read lock (at once, whoever waits)
// and keep it after its write Unlock: a downgrade. The opposite, an upgrade
// (Lock with a context that holds only the read lock), is refused with
// ErrUpgrade: two readers upgrading would wait for each other forever.
//
// Each read hold has a lease of its own, renewed by the Client's watchdog (or
// fixed by WithLease), so a reader that crashed keeps writers out for at most
// its lease, whatever other readers do. As with Mutex, the lock context keeps
// the values of the call's ctx but not its cancellation, and is cancelled
// exactly when its hold ends: with cause ErrUnlocked after its final unlock,
// ErrLeaseLost when the lease was lost (see Lock context in the package
// documentation).
//
// # Writer preference
//
// Waiters queue in Redis in arrival order, and whoever finds the lock taken
// queues. A reader enters at once only when no writer holds the lock and no
// one is queued; a writer only when no one holds it and no one is queued. So
// once a writer is queued, readers that come after it queue behind it, even
// while other readers hold the lock (readers already holding may re-enter),
// and the writer gets the lock when those readers are done: a stream of
// readers cannot starve writers. When the lock becomes free for the head of
// the queue, the script that freed it grants it in the same step: to a writer
// at the head once no reader holds, or to every reader from the head up to the
// next writer, who enter together. A write release thus tells all the readers
// it admits with one message (on the lock's read channel), and the last read
// release tells one writer (on its Client's grant channel). As with Mutex, the
// message carries the grant, proven with a secret of each waiter's queue
// entry, so a waiter holds the lock without a further round trip, and no one
// without the secret can make it believe it does. A grant runs for the
// waiter's claim window (WithClaimWindow, 3s by default) until its Client
// extends it to the lease with an early renewal batched with the watchdog's; a
// waiter whose last check is more than half a window old, or that asked for a
// WithLease hold, confirms the grant with one round trip instead. Every wait
// is also bounded by the lease of the holders (the writer's, or the earliest
// reader's), so a lost message costs at most one lease (a waiter whose
// re-check comes after its grant's claim window lapsed finds the lock gone on,
// and queues again at the back). A grant that no process hears (the waiters'
// Clients are gone) is undone at once and the next waiter served. A waiter
// granted the lock that cannot take it up (its process hung with its
// connections open, or gone while live readers admitted with it heard the
// message) holds it for its claim window only, and the waiter queued next is
// told to re-check when that window lapses: it holds the queue up for seconds,
// not a lease.
//
// # Fencing
//
// Every write acquisition gets a fencing token from the lock's counter above
// every token issued before (as with Mutex, tokens are not consecutive).
// Readers get the token of the last writer, which they share: a resource
// that remembers the highest token it saw from a writer can reject a stale
// writer, and tell readers what they read.
type RWMutex struct {
	c    *core.Client
	name string
	err  error // invalid name, reported by every method
	keys rwKeys
	// Names of its holds in a context's chain (see holdLink): a control
	// character cannot start a Mutex name, so they meet no Mutex's.
	wname, rname string
}

// RWMutex returns the reader/writer lock called name. It is cheap: an RWMutex
// is only a name bound to the Client. An invalid name is reported by every
// method of the returned RWMutex, wrapped in ErrInvalidName.
func (c *Client) RWMutex(name string) *RWMutex {
	if c.c == nil {
		return &RWMutex{name: name, err: errZero("Client", "New")}
	}
	return &RWMutex{c: c.c, name: name, err: core.ValidateName(name, ErrInvalidName),
		keys: newRWKeys(c.c.Cfg.KeyPrefix, name, c.c.ID), wname: "\x00w" + name, rname: "\x00r" + name}
}

// Name returns the name the RWMutex was created with.
func (rw *RWMutex) Name() string { return rw.name }

// String describes the RWMutex for logs.
func (rw *RWMutex) String() string { return "rlock.RWMutex(" + strconv.Quote(rw.name) + ")" }

// RLock blocks until it holds the read lock, ctx is done, or the wait timeout
// of WithWaitTimeout runs out. It enters at once when no writer holds the lock
// and no one waits; otherwise it queues behind the waiters before it (see
// Writer preference) and sleeps, without polling, until a release admits it.
// Connection errors are retried with backoff until ctx ends, as in Mutex.Lock.
//
// ctx bounds the wait only. On success it returns the lock context that
// carries the read hold (with ctx's values, ended by this hold only, as
// Mutex.Lock's); pass it, not ctx, to RUnlock. Without WithLease the watchdog
// renews the hold's own lease until RUnlock. On failure nothing is held and
// nothing is left behind in Redis; the error matches ctx's error when ctx
// ended, ErrLocked (and context.DeadlineExceeded) when the wait timeout ran
// out, and otherwise as Mutex.Lock's.
//
// If ctx holds the read lock, RLock re-enters at once and returns ctx. If ctx
// holds the write lock, RLock takes the read lock at once, whoever waits, so
// that the holder may keep it after Unlock of the write lock (a downgrade):
// its lock context ends with the read hold only, so the write Unlock does not
// cancel it. It never waits for the lock, only, as any blocking call, for
// Redis: a reply that is lost is retried while ctx lasts (or, with
// WithWaitTimeout, until the timeout after the first attempt).
func (rw *RWMutex) RLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return rw.observedLock(ctx, "RLock", false, true, opts)
}

// TryRLock makes one attempt at the read lock. It returns the lock context as
// RLock does, or an error matching ErrLocked when a writer holds the lock or
// one is queued, or ErrUnavailable when Redis could not be reached. A context
// that holds the read lock re-enters; one that holds the write lock takes the
// read lock too.
func (rw *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return rw.observedLock(ctx, "TryRLock", false, false, opts)
}

// Lock blocks until it holds the write lock, ctx is done, or the wait timeout
// of WithWaitTimeout runs out. It enters at once when no one holds the lock and
// no one waits; otherwise it queues, which keeps readers that come later out,
// and sleeps, without polling, until the lock is granted to it. Connection
// errors are retried with backoff until ctx ends, as in Mutex.Lock.
//
// ctx bounds the wait only. On success it returns the lock context that
// carries the write hold (with a new fencing token, see Token; with ctx's
// values, ended by this hold only, as Mutex.Lock's); pass it, not ctx, to
// Unlock. On failure nothing is held and nothing is left behind in Redis; the
// error matches ctx's error when ctx ended, ErrLocked (and
// context.DeadlineExceeded) when the wait timeout ran out, ErrUpgrade, at
// once, when ctx holds the read lock but not the write lock, and otherwise as
// Mutex.Lock's.
//
// If ctx holds the write lock, Lock re-enters at once and returns ctx.
func (rw *RWMutex) Lock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return rw.observedLock(ctx, "Lock", true, true, opts)
}

// TryLock makes one attempt at the write lock. It returns the lock context as
// Lock does, or an error matching ErrLocked when another owner holds the lock
// (as a reader or a writer) or someone is queued, ErrUnavailable when Redis
// could not be reached, and ErrUpgrade when ctx holds the read lock only. A context that holds the write lock re-enters.
func (rw *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (context.Context, error) {
	return rw.observedLock(ctx, "TryLock", true, false, opts)
}

// RUnlock releases one level of the read hold carried by lockCtx. The final
// level ends the hold (cancelling its lock context with cause ErrUnlocked),
// and when it was the last reader, the lock goes to the writer at the head of
// the queue, woken by one message. It works and fails as Mutex.Unlock does:
// ErrNotHeld when lockCtx holds no read lock (also matching ErrLeaseLost when
// the lease was lost), an *AbandonError when the release itself failed.
func (rw *RWMutex) RUnlock(lockCtx context.Context) error {
	return rw.unlock(lockCtx, false)
}

// Unlock releases one level of the write hold carried by lockCtx. The final
// level ends the hold (cancelling its lock context with cause ErrUnlocked)
// and frees the lock for the head of the queue: a writer, or all the readers
// up to the next writer, woken together by one message. A read hold taken
// under the write hold is kept. It works and fails as Mutex.Unlock does:
// ErrNotHeld when lockCtx holds no write lock (also matching ErrLeaseLost when
// the lease was lost), an *AbandonError when the release itself failed.
func (rw *RWMutex) Unlock(lockCtx context.Context) error {
	return rw.unlock(lockCtx, true)
}

// observedLock is lock, counted in the Client's Stats and told to its
// Observer.
func (rw *RWMutex) observedLock(ctx context.Context, op string, write, wait bool, opts []LockOption) (context.Context, error) {
	if rw.c == nil {
		return rw.lock(ctx, write, wait, opts, &core.Call{}) // fails: see usable
	}
	call := core.Call{Start: time.Now()}
	lockCtx, err := rw.lock(ctx, write, wait, opts, &call)
	kind := rwReadKind
	if write {
		kind = rwWriteKind
	}
	rw.c.Acquired(ctx, kind, op, rw.name, &call, err, ErrLocked)
	return lockCtx, err
}

// Token returns the fencing token of the hold carried by lockCtx: that of the
// write hold while lockCtx holds the write lock, else that of its read hold,
// which is the token of the last writer before it (readers share it; a new
// one, above every token before, when the counter expired while the lock was
// idle: see "What stays in Redis" in the package documentation). It stays the
// same across re-entries. It fails with ErrNotHeld when lockCtx
// carries no hold of the lock (a hold that ended still reports its token).
func (rw *RWMutex) Token(lockCtx context.Context) (uint64, error) {
	if rw.err != nil {
		return 0, rw.err
	}
	_, h := rw.current(lockCtx)
	if h == nil {
		return 0, fmt.Errorf("%w: the context holds no lock %q: pass the lock context that Lock or RLock returned (or one derived from it), not the context given to it",
			ErrNotHeld, rw.name)
	}
	return h.Token(), nil
}

// HoldCount returns how many times the owner carried by lockCtx holds the lock
// in Redis: the levels of its write hold while it holds the write lock, else
// of its read hold (0 when it holds neither).
func (rw *RWMutex) HoldCount(lockCtx context.Context) (int, error) {
	if err := rw.usable(); err != nil {
		return 0, err
	}
	write, h := rw.current(lockCtx)
	if h == nil {
		return 0, nil
	}
	if ended, _ := h.State(); ended {
		return 0, nil
	}
	key := rw.keys.writer
	if !write {
		key = rw.keys.counts
	}
	ctx, cancel := rw.c.UnlockContext(lockCtx)
	defer cancel()
	n, err := rw.c.RC.Do(ctx, rw.c.RC.B().Hget().Key(key).Field(h.Owner()).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, rw.wrap("hold count", err)
	}
	return int(n), nil
}

// current is the hold Token and HoldCount report on: the write hold while it
// lasts, else the read hold, else an ended write hold.
func (rw *RWMutex) current(ctx context.Context) (write bool, h *core.Hold) {
	wl, rl := rw.links(ctx)
	switch {
	case wl != nil && !ended(wl.h):
		return true, wl.h
	case rl != nil:
		return false, rl.h
	case wl != nil:
		return true, wl.h
	}
	return false, nil
}

// links finds the write and read holds carried by ctx (see holdLink).
func (rw *RWMutex) links(ctx context.Context) (w, r *holdLink) {
	if ctx == nil {
		return nil, nil
	}
	l, _ := ctx.Value(holdsKey{}).(*holdLink)
	for ; l != nil && (w == nil || r == nil); l = l.outer {
		if l.c != rw.c {
			continue
		}
		switch {
		case w == nil && l.name == rw.wname:
			w = l
		case r == nil && l.name == rw.rname:
			r = l
		}
	}
	return w, r
}

func ended(h *core.Hold) bool {
	e, _ := h.State()
	return e
}

func (rw *RWMutex) usable() error {
	if rw.err != nil {
		return rw.err
	}
	if rw.c == nil {
		return errZero("RWMutex", "Client.RWMutex")
	}
	if rw.c.IsClosed() {
		return ErrClosed
	}
	return nil
}

func (rw *RWMutex) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrLocked) {
		return err
	}
	return core.Refused(fmt.Errorf("rlock: %s %q: %w", op, rw.name, core.Inner(err)))
}

// noHold is the error of an unlock given a context that carries no hold of
// the lock of that kind (see Mutex.noHold).
func (rw *RWMutex) noHold(ctx context.Context, write bool) error {
	what, name, verb := "read", rw.rname, "RLock"
	if write {
		what, name, verb = "write", rw.wname, "Lock"
	}
	if other := otherClientHold(ctx, rw.c, name); other != nil {
		return fmt.Errorf("%w: the context holds the %s lock %q through another Client (%s), not this RWMutex's (%s): use that Client's RWMutex",
			ErrNotHeld, what, rw.name, other.ID, rw.c.ID)
	}
	switch wl, rl := rw.links(ctx); {
	case write && rl != nil:
		return fmt.Errorf("%w: the context holds the read lock %q, not the write lock: use RUnlock", ErrNotHeld, rw.name)
	case !write && wl != nil:
		return fmt.Errorf("%w: the context holds the write lock %q, not the read lock: use Unlock", ErrNotHeld, rw.name)
	}
	return fmt.Errorf("%w: the context holds no %s lock %q: pass the lock context that %s returned (or one derived from it), not the context given to %s",
		ErrNotHeld, what, rw.name, verb, verb)
}

func (rw *RWMutex) notHeld(what string, cause error) error {
	if cause == nil || errors.Is(cause, ErrUnlocked) {
		return fmt.Errorf("%w: the %s lock %q was already unlocked by this context", ErrNotHeld, what, rw.name)
	}
	return fmt.Errorf("%w: the %s lock %q: %w", ErrNotHeld, what, rw.name, core.Inner(cause))
}

func lockWord(write bool) string {
	if write {
		return "write"
	}
	return "read"
}
