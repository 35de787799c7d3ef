package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/mux"
)

const (
	minRetryBackoff = 10 * time.Millisecond
	maxRetryBackoff = time.Second
)

// Attempt tries once to get a resource. When the resource is busy it returns
// how long it is worth sleeping before trying again even if no message comes:
// the holder's remaining lease. A transient error (see transient) is retried with
// backoff; any other error ends the wait.
type Attempt func(ctx context.Context) (ok bool, retryIn time.Duration, err error)

// WaitFor subscribes to channel and runs try until it succeeds, sleeping between
// tries until a message or reconnect wakes this waiter, retryIn passes, or ctx
// ends. The subscription is confirmed before the first try, so a release after
// a failed try always wakes someone.
//
// The Waiter is passed to try, which may tag it (see mux.Waiter.SetTag) so
// that a release can wake it by name.
func (c *Client) WaitFor(ctx context.Context, channel string, weight int64, try TryFunc) error {
	return c.WaitForWithin(ctx, 0, nil, channel, weight, try)
}

// TryFunc is one attempt of a wait (see WaitFor).
type TryFunc = func(ctx context.Context, w *mux.Waiter) (ok bool, retryIn time.Duration, err error)

// WaitForWithin is WaitFor bounded by a wait timeout besides ctx (none when
// timeout is 0), which starts once the wait's first try has returned: for a
// call that made no attempt before its wait, so that however short the
// timeout, Redis answers once before it can end the call (and the call
// learns whether the lock is taken, or Redis cannot be reached). The wait's
// context ends with cause when the timeout runs out. ctx bounds everything.
func (c *Client) WaitForWithin(ctx context.Context, timeout time.Duration, cause error, channel string, weight int64, try TryFunc) error {
	w, err := c.Mux.SubscribeWeighted(ctx, channel, weight)
	if err != nil {
		if c.IsClosed() {
			return ErrClosed
		}
		if ctx.Err() != nil {
			// The wait ended while subscribing: report why it ended.
			return CtxError(ctx)
		}
		return err
	}
	return c.WaitWithin(ctx, timeout, cause, w, try)
}

// WaitWith is WaitFor on a Waiter subscribed (and perhaps tagged) already;
// it leaves w when it returns. It leaves without handing a wake-up on to the
// next Waiter of the channel: the locks wait on grant channels (see
// GrantChannel), where every message names the one Waiter it is for, and a
// wake-up passed on would only make a listener (a cohort's watch) doubt its
// hold.
func (c *Client) WaitWith(ctx context.Context, w *mux.Waiter, try TryFunc) error {
	return c.WaitWithin(ctx, 0, nil, w, try)
}

// WaitWithin is WaitForWithin on a Waiter subscribed already (see WaitWith).
func (c *Client) WaitWithin(ctx context.Context, timeout time.Duration, cause error, w *mux.Waiter, try TryFunc) error {
	defer w.Leave(true)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastErr error
	backoff := time.Duration(0)
	for {
		ok, retryIn, err := try(ctx, w)
		// (Not after another caller's deadline closed the connection: no
		// answer yet.)
		if timeout > 0 && !ok && (err == nil || !SaysNothing(ctx, err)) {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, timeout, cause)
			defer cancel()
			timeout = 0
		}
		switch {
		case ok:
			return nil
		case err != nil && Retryable(ctx, err):
			lastErr = err
			backoff = min(max(2*backoff, minRetryBackoff), maxRetryBackoff)
			retryIn = backoff
		case err != nil && ctx.Err() != nil:
			// The attempt failed because the wait ended: report why it ended.
			return CtxError(ctx)
		case err != nil:
			return err
		default:
			backoff = 0
		}
		timer.Reset(retryIn)
		select {
		case <-w.C():
		case <-timer.C:
		case <-w.Done():
			return ErrClosed
		case <-ctx.Done():
			err := CtxError(ctx)
			if lastErr != nil {
				err = fmt.Errorf("%w (last error: %w)", err, lastErr)
			}
			return err
		}
	}
}

// CtxError is ctx's error, joined with its cause when that says more, so that
// the result matches both.
func CtxError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		if cause == nil {
			return err
		}
		return cause
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// RetryAfter turns a holder's PTTL into the longest sleep before re-checking.
func (c *Client) RetryAfter(pttl int64) time.Duration {
	if pttl < 0 {
		return c.Cfg.NoExpiryPoll // no lease to wait out
	}
	// One extra millisecond so that the key has really expired when we look.
	return time.Duration(pttl+1) * time.Millisecond
}

// Transient tells errors worth retrying: connection failures, and Redis
// replies that mean "not now" (loading, failover, busy script) or "not here"
// (MOVED, ASK: only a command pinned to a connection, WithReplicaAck's script
// and WAIT, sees them, as rueidis follows them elsewhere; the command did not
// run, and rueidis refreshes its slot map meanwhile, so that a retry goes to
// the slot's master after a failover or a resharding). Everything else,
// including every error this module constructs, is final: retrying it could
// only loop.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, rueidis.ErrClosing):
		return false
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		_, moved := re.IsMoved()
		_, ask := re.IsAsk()
		return moved || ask || re.IsLoading() || re.IsTryAgain() || re.IsClusterDown() ||
			strings.HasPrefix(msg, "BUSY") || strings.HasPrefix(msg, "MASTERDOWN") || strings.HasPrefix(msg, "READONLY")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, rueidis.ErrNoSlot) || errors.Is(err, rueidis.ErrDoCacheAborted)
}

// SaysNothing tells whether err, an attempt's error from a call made with ctx,
// says nothing of Redis: ctx ended, or err is a context error (ctx's
// deadline, which rueidis may report, from a blocking WAIT say, a moment
// before ctx does; or another caller's, which rueidis gives every command on
// the connection that caller's deadline closed). What the attempts before it
// learned still holds.
func SaysNothing(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Retryable tells errors of a call made with ctx worth retrying while ctx
// lasts: transient ones, and context errors that are not ctx's own. rueidis
// fails the commands queued on a connection with the error that closed it,
// which may be the deadline of another caller's context.
func Retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	return Transient(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// RetryTransient runs op until it succeeds, fails for good, or ctx ends.
// Errors are retried when transient, or when they are another context's
// (see Retryable); op must be idempotent.
func RetryTransient(ctx context.Context, op func() error) error {
	return RetryTransientWithin(ctx, 0, op)
}

// RetryTransientWithin is RetryTransient with no retry begun later than
// limit after the first (none when limit is 0): past it, op's last error
// is returned as it is, so that however short limit is, Redis is asked
// once.
func RetryTransientWithin(ctx context.Context, limit time.Duration, op func() error) error {
	backoff := minRetryBackoff
	var end time.Time
	if limit > 0 {
		end = time.Now().Add(limit)
	}
	for {
		err := op()
		if err == nil || !Retryable(ctx, err) || !end.IsZero() && !time.Now().Add(backoff).Before(end) {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// Inspect runs op, a read that may be repeated (or a write that is idempotent),
// retrying connection errors with backoff for up to the unlock timeout (or
// until ctx ends): the first command on a connection that broke (a Redis
// restart, say) fails once, which an inspection call should not report.
func (c *Client) Inspect(ctx context.Context, op func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.Cfg.UnlockTimeout)
	defer cancel()
	return RetryTransient(ctx, func() error {
		err := op(ctx)
		c.NoteError(err)
		return err
	})
}
