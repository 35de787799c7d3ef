//go:build linux

package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// rwSelftest returns a fabricated RWMutex run of total operations whose
// resource holds the given lists (key, then entries), for the checker.
func rwSelftest(t *testing.T, total int64, lists map[string][]string) *run {
	t.Helper()
	servers := redistest.NewN(t, 2)
	r := &run{
		t: t, sc: scenario{name: "selftest-rw", kind: "rw"},
		lock: servers[0], res: servers[1],
		targets:          map[string]targetFault{},
		leftoverPatience: 200 * time.Millisecond,
	}
	r.resRC = redistest.Client(t, r.res)
	r.cfg = workerConfig{Kind: "rw", Total: total, Limit: 1, WriteEvery: rwWrites}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for key, entries := range lists {
		if _, err := r.res.Do(ctx, append([]string{"RPUSH", key}, entries...)...); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// rwOp is an operation that took the lock and released it, its fenced reads
// (and write) accepted.
func rwOp(worker int, op int64, owner string, write bool, token uint64, value int64) event {
	e := event{Kind: "op", Worker: worker, Op: op, Owner: owner, Write: write, Token: token, T0: 1, TAcq: 2, TWrite: 3,
		ReadOK: true, Value: value, ReleaseClass: "ok", Cause: "released"}
	if write {
		e.WriteOK = true
	} else {
		e.Read2OK, e.Value2 = true, value
	}
	return e
}

func wantViolations(t *testing.T, res result, want, unwanted []string) {
	t.Helper()
	all := strings.Join(res.violations, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the checker missed %q; it reported:\n%s", w, all)
		}
	}
	for _, u := range unwanted {
		if strings.Contains(all, u) {
			t.Errorf("the checker reported %q, which is allowed; it reported:\n%s", u, all)
		}
	}
}

// TestCheckerCatchesReaderWriterOverlap feeds the checker an RWMutex run in
// which a reader and a writer were at the resource at once: fenced (a write
// under the token readers had read under, a read under a token below an
// accepted write's), as the reader saw it (the value changed during its
// hold), and as the workload saw it (both inside, neither lost its lease),
// beside an overlap a lost lease excuses.
func TestCheckerCatchesReaderWriterOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	t.Parallel()
	r := rwSelftest(t, 6, map[string][]string{
		resLog:    {"1 10 w0.op1 0 1", "3 20 w2.op3 1 2", "6 30 w2.op6 2 3"},
		resReads:  {"2 20 w1.op2 1", "4 10 w0.op4 2", "5 20 w1.op5 2"},
		resExceed: {"w2.op3 w1.op2 w2.op3", "w2.op6 w1.op5 w2.op6"},
		resReject: {"20 w1.op5 read 30"},
	})
	op5 := rwOp(1, 5, "w1.op5", false, 20, 2)
	op5.Read2OK, op5.Value2, op5.Cause, op5.ReleaseClass = false, 0, "leaselost", "lost"
	reader := rwOp(1, 2, "w1.op2", false, 20, 1)
	reader.Value2 = 2 // it read again after w2.op3's write: not shown in the log, on purpose
	r.events = []event{rwOp(0, 1, "w0.op1", true, 10, 0), reader, rwOp(2, 3, "w2.op3", true, 20, 1),
		rwOp(0, 4, "w0.op4", false, 10, 2), op5, rwOp(2, 6, "w2.op6", true, 30, 2)}

	res := r.check(0)
	wantViolations(t, res, []string{
		"write under token 20 (w2.op3) accepted after a read under token 20 (w1.op2)",
		"read under token 10 (w0.op4) accepted after a write under token 20 (w2.op3)",
		"reader w1.op2 (op 2, token 20) saw the value change from 1 to 2",
		"2 inside at once, a writer among them: w1.op2 (reader, token 20) and w2.op3 (writer, token 20) both kept their leases",
	}, []string{"w1.op5 (reader"})
	if res.overlaps != 1 {
		t.Errorf("overlaps %d, want 1 (w1.op5 lost its lease)", res.overlaps)
	}
}

// TestCheckerCatchesWriterOverlap feeds the checker an RWMutex run in which
// two writers were at the resource at once: both inside, neither lost its
// lease; the same token accepted twice, a lower one after a higher one, a
// lost update; and a worker whose writes never got the lock.
func TestCheckerCatchesWriterOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	t.Parallel()
	r := rwSelftest(t, 5, map[string][]string{
		resLog:    {"1 10 w0.op1 0 1", "2 10 w1.op2 1 2", "3 5 w0.op3 1 2"},
		resExceed: {"w1.op2 w0.op1 w1.op2"},
	})
	starved := event{Kind: "op", Worker: 2, Op: 4, Owner: "w2.op4", Write: true, T0: 1, TAcq: 2, AcqClass: "timeout", AcqErr: "rlock: timed out"}
	r.events = []event{rwOp(0, 1, "w0.op1", true, 10, 0), rwOp(1, 2, "w1.op2", true, 10, 1), rwOp(0, 3, "w0.op3", true, 5, 1),
		starved, rwOp(2, 5, "w2.op5", false, 10, 2)}

	res := r.check(0)
	wantViolations(t, res, []string{
		"2 inside at once, a writer among them: w0.op1 (writer, token 10) and w1.op2 (writer, token 10) both kept their leases",
		"token 10 accepted twice",
		"token 5 accepted after token 10",
		"lost update",
		"worker 2 starved: none of its 1 write acquisitions succeeded",
	}, nil)
}

// TestCheckerAllowsSharedReads feeds the checker a clean RWMutex run in
// which readers overlapped one another, at the resource (reads under one
// token, between writes) and as the workload saw it (an entry that found
// only readers inside, as the resource never logs): no violation.
func TestCheckerAllowsSharedReads(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	t.Parallel()
	r := rwSelftest(t, 6, map[string][]string{
		resLog:    {"1 10 w0.op1 0 1", "6 20 w2.op5 1 2"},
		resReads:  {"2 10 w1.op2 1", "3 10 w2.op3 1", "4 10 w1.op2 1", "5 10 w2.op3 1", "7 20 w0.op6 2", "8 20 w0.op6 2"},
		resExceed: {"w2.op3 w1.op2 w2.op3", "w1.op4 w1.op2 w2.op3 w1.op4"},
	})
	op4 := rwOp(1, 4, "w1.op4", false, 10, 1)
	op4.Token, op4.ReadOK, op4.Read2OK, op4.Value, op4.Value2 = 5, false, false, 0, 0
	r.events = []event{rwOp(0, 1, "w0.op1", true, 10, 0), rwOp(1, 2, "w1.op2", false, 10, 1), rwOp(2, 3, "w2.op3", false, 10, 1),
		op4, rwOp(2, 5, "w2.op5", true, 20, 1), rwOp(0, 6, "w0.op6", false, 20, 2)}
	// op4 reports a rejected read: the resource must hold it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.res.Do(ctx, "RPUSH", resReject, "5 w1.op4 read 10"); err != nil {
		t.Fatal(err)
	}

	res := r.check(0)
	if len(res.violations) > 0 {
		t.Errorf("the checker reported violations in a clean run:\n%s", strings.Join(res.violations, "\n"))
	}
	if res.overlaps != 0 || res.accepted != 2 || res.acceptedReads != 6 || res.rejected != 1 {
		t.Errorf("overlaps %d (want 0), accepted writes %d (want 2), reads %d (want 6), rejected %d (want 1)",
			res.overlaps, res.accepted, res.acceptedReads, res.rejected)
	}
}
