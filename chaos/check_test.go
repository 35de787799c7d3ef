//go:build linux

package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// result is one scenario's figures and the violations found.
type result struct {
	name       string
	ops        int64
	faults     int
	acquired   int
	accepted   int // fenced writes accepted (Mutex) or critical sections run (semaphore)
	rejected   int // fenced reads or writes rejected
	overlaps   int // entries over the limit, all excused by a lost lease
	lostLeases int
	timeouts   int // waits that ended with the wait timeout (a clear error)
	errs       int // acquisitions failed with a Redis error (a clear error)
	// foreignDeadlines counts acquisitions failed with an error matching
	// context.DeadlineExceeded although neither the caller's context nor the
	// wait timeout had ended.
	foreignDeadlines int
	// lateReleases counts releases that succeeded in Redis after the client
	// had already declared the lease lost (and cancelled the context).
	lateReleases int
	stuck        int
	recovery     time.Duration
	elapsed      time.Duration
	violations   []string
}

func (res *result) violation(format string, args ...any) {
	res.violations = append(res.violations, fmt.Sprintf(format, args...))
}

// stuckSlack is how far past its wait timeout an acquisition may return
// before it counts as stuck: generous, for a loaded machine under -race.
const stuckSlack = 15 * time.Second

// check verifies the run once the workload is over; the workers are still
// connected.
func (r *run) check(elapsed time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.mu.Lock()
	events := slices.Clone(r.events)
	faults := slices.Clone(r.faults)
	targets := make(map[string]targetFault, len(r.targets))
	for k, v := range r.targets {
		targets[k] = v
	}
	r.mu.Unlock()
	res := result{name: r.sc.name, ops: r.cfg.Total, elapsed: elapsed}
	for _, f := range faults {
		if f.kind != "drop" {
			res.faults++
		}
	}
	for _, p := range r.proxies {
		res.faults += int(p.Dropped())
	}

	// Every operation reported exactly once, within its bound.
	byOwner := map[string]event{}
	seen := map[int64]int{}
	for _, e := range events {
		if e.Kind == "fatal" {
			res.violation("worker %d failed: %s", e.Worker, e.Msg)
			continue
		}
		seen[e.Op]++
		byOwner[e.Owner] = e
		wait := time.Duration(e.TAcq - e.T0)
		if wait > waitTimeout+stuckSlack {
			res.stuck++
			res.violation("op %d waited %v (bound %v)", e.Op, wait, waitTimeout)
		}
		switch e.AcqClass {
		case "":
			res.acquired++
		case "timeout":
			res.timeouts++
		case "redis", "nolimit":
			res.errs++
		case "foreign-deadline":
			res.errs++
			res.foreignDeadlines++
		default:
			res.violation("op %d: acquisition failed after %v with an unclear error (%s): %s", e.Op, wait.Round(time.Millisecond), e.AcqClass, e.AcqErr)
		}
		if e.AcqClass != "" {
			continue
		}
		if e.Cause == "leaselost" {
			res.lostLeases++
		}
		switch {
		case e.Cause == "held":
			res.violation("op %d: hold context still live after release (%s: %s)", e.Op, e.ReleaseClass, e.ReleaseErr)
		case strings.HasPrefix(e.Cause, "other"):
			res.violation("op %d: hold context ended with an unexpected cause: %s", e.Op, e.Cause)
		case e.ReleaseClass == "ok" && e.Cause == "leaselost":
			// The client gave the lease up (renewals failed until its
			// conservative deadline) while the release was on its way; Redis
			// still had the hold and released it. Safe: the holder was told.
			res.lateReleases++
		case e.ReleaseClass == "ok" && e.Cause != "released":
			res.violation("op %d: released, but the cause is %s", e.Op, e.Cause)
		case (e.ReleaseClass == "lost" || e.ReleaseClass == "notheld") && e.Cause != "leaselost":
			res.violation("op %d: release said %s (%s), but the cause is %s", e.Op, e.ReleaseClass, e.ReleaseErr, e.Cause)
		case e.ReleaseClass == "error":
			res.violation("op %d: release failed: %s", e.Op, e.ReleaseErr)
		}
		if r.sc.kind == "mutex" && (!e.ReadOK || !e.WriteOK) {
			res.rejected++
		}
		if r.sc.kind == "semaphore" {
			res.accepted++
		}
	}
	for op := int64(1); op <= r.cfg.Total; op++ {
		switch seen[op] {
		case 1:
		case 0:
			res.stuck++
			res.violation("op %d never finished", op)
		default:
			res.violation("op %d reported %d times", op, seen[op])
		}
	}

	// Fencing: the resource's log of accepted writes.
	if r.sc.kind == "mutex" {
		res.checkFencing(ctx, r, byOwner)
	}

	// Mutual exclusion as the workload saw it: an entry over the limit is
	// excused only when one of those inside had lost its lease.
	exc, err := resource{c: r.resRC}.exceedances(ctx)
	if err != nil {
		res.violation("resource: %v", err)
	}
	for _, inside := range exc {
		excused := false
		for _, owner := range inside[1:] {
			if e, ok := byOwner[owner]; ok && e.Cause == "leaselost" {
				excused = true
			}
		}
		if excused {
			res.overlaps++
		} else {
			res.violation("%d inside at once (limit %d), none with a lost lease: %v", len(inside)-1, r.cfg.Limit, inside[1:])
		}
	}

	// Operations a fault was aimed at (a paused or cut-off holder) must have
	// lost their lease, and a stale write of theirs must have been rejected.
	for owner, tg := range targets {
		e, ok := byOwner[owner]
		if !ok || e.AcqClass != "" || e.TWrite < tg.start {
			continue // the fault came after the critical section: it missed
		}
		kind := tg.kind
		if e.Cause != "leaselost" {
			res.violation("%s: %s holder %s kept its lease (cause %s, release %s)", r.sc.name, kind, owner, e.Cause, e.ReleaseClass)
		}
	}

	// Recovery: from the end of each fault to the next acquisition.
	acqTimes := make([]int64, 0, len(events))
	for _, e := range events {
		if e.Kind == "op" && e.AcqClass == "" {
			acqTimes = append(acqTimes, e.TAcq)
		}
	}
	slices.Sort(acqTimes)
	for _, f := range faults {
		i, _ := slices.BinarySearch(acqTimes, f.end)
		if i < len(acqTimes) {
			res.recovery = max(res.recovery, time.Duration(acqTimes[i]-f.end))
		}
	}

	r.checkLeftovers(ctx, &res)
	return res
}

func (res *result) checkFencing(ctx context.Context, r *run, byOwner map[string]event) {
	log, err := resource{c: r.resRC}.log(ctx)
	if err != nil {
		res.violation("resource log: %v", err)
		return
	}
	res.accepted = len(log)
	tokens := map[int64]string{}
	var last acceptedWrite
	for i, w := range log {
		if prev, dup := tokens[w.token]; dup {
			res.violation("token %d accepted twice: %s and %s", w.token, prev, w.owner)
		}
		tokens[w.token] = w.owner
		if i > 0 && w.token <= last.token {
			res.violation("token %d accepted after token %d", w.token, last.token)
		}
		if w.old != last.new || w.new != w.old+1 {
			res.violation("lost update: write %d (%s) changed %d to %d after the value was %d", w.seq, w.owner, w.old, w.new, last.new)
		}
		if e, ok := byOwner[w.owner]; ok && (!e.WriteOK || uint64(w.token) != e.Token) {
			res.violation("write of %s accepted by the resource but reported as %+v", w.owner, e)
		}
		last = w
	}
	if n, err := (resource{c: r.resRC}).rejections(ctx); err == nil && int(n) != res.rejected {
		res.violation("resource rejected %d reads or writes, workers reported %d", n, res.rejected)
	}
}

// checkLeftovers waits for the lock server to be clean: no subscription, no
// lock or queue key, every permit back.
func (r *run) checkLeftovers(ctx context.Context, res *result) {
	patience := 3*watchdog + 10*time.Second
	if r.leftoverPatience > 0 {
		patience = r.leftoverPatience
	}
	deadline := time.Now().Add(patience)
	var problems []string
	for {
		problems = r.leftovers(ctx)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	for _, p := range problems {
		res.violation("left over: %s", p)
	}
}

func (r *run) leftovers(ctx context.Context) []string {
	var out []string
	msg, err := r.lock.Do(ctx, "PUBSUB", "CHANNELS", "chaos*")
	if err != nil {
		return []string{fmt.Sprintf("PUBSUB CHANNELS: %v", err)}
	}
	chans, _ := msg.AsStrSlice()
	if len(chans) > 0 {
		n, err := r.lock.NumSub(ctx, chans...)
		if err != nil {
			return []string{fmt.Sprintf("PUBSUB NUMSUB: %v", err)}
		}
		for ch, k := range n {
			if k > 0 {
				out = append(out, fmt.Sprintf("%d subscriber(s) on %s", k, ch))
			}
		}
	}
	snap, err := r.lock.Snapshot(ctx, "*")
	if err != nil {
		return append(out, fmt.Sprintf("snapshot: %v", err))
	}
	for k, st := range snap {
		if st.HasExpiry {
			continue // a release latch or tombstone, gone by itself soon
		}
		typ, err := r.lock.Do(ctx, "TYPE", k)
		if err != nil {
			return append(out, fmt.Sprintf("TYPE %s: %v", k, err))
		}
		ts, _ := typ.ToString()
		switch {
		case ts == "string": // a counter: fencing tokens, arrival numbers
		case ts == "hash" && strings.HasSuffix(k, ":sem"): // the semaphore's limit and counts
		default:
			out = append(out, fmt.Sprintf("key %s (%s) without expiry", k, ts))
		}
	}
	if r.sc.kind == "semaphore" {
		st, err := semState(ctx, r)
		if err != nil {
			out = append(out, fmt.Sprintf("semaphore state: %v", err))
		} else if st.Held != 0 || st.Queued != 0 || st.Limit != r.cfg.Limit {
			out = append(out, fmt.Sprintf("semaphore not back to its limit: %+v", st))
		}
	}
	return out
}

func semState(ctx context.Context, r *run) (semaphore.State, error) {
	rc, err := r.lock.Client()
	if err != nil {
		return semaphore.State{}, err
	}
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithKeyPrefix("chaos"))
	if err != nil {
		return semaphore.State{}, err
	}
	defer c.Close()
	return semaphore.New(c, "res").State(ctx)
}
