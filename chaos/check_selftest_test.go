//go:build linux

package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
)

// TestCheckerCatchesViolations feeds the checker a fabricated run full of
// violations and makes sure it reports each of them: a checker that cannot
// fail proves nothing.
func TestCheckerCatchesViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	t.Parallel()
	servers := redistest.NewN(t, 2)
	r := &run{
		t: t, sc: scenario{name: "selftest", kind: "mutex"},
		lock: servers[0], res: servers[1],
		targets:          map[string]targetFault{"w0.op4": {kind: "paused", start: 1}},
		leftoverPatience: 200 * time.Millisecond,
	}
	r.resRC = redistest.Client(t, r.res)
	r.cfg = workerConfig{Total: 6, Limit: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cmd := range [][]string{
		// tokens 5, 5 (twice), 3 (backwards); 1 -> 2 then 1 -> 2 (lost update)
		{"RPUSH", resLog, "1 5 w0.op1 0 1", "2 5 w0.op2 1 2", "3 3 w0.op3 1 2"},
		{"RPUSH", resExceed, "w0.op1 w0.op1 w0.op2"},
		// a lock key left behind
		{"HSET", "chaos:{res}", "owner", "1"},
	} {
		if _, err := r.res.Do(ctx, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.lock.Do(ctx, "HSET", "chaos:{res}", "owner", "1"); err != nil {
		t.Fatal(err)
	}
	ok := func(op int64, owner string, tok uint64) event {
		return event{Kind: "op", Op: op, Owner: owner, Token: tok, T0: 1, TAcq: 2, TWrite: 3, ReadOK: true, WriteOK: true, ReleaseClass: "ok", Cause: "released"}
	}
	slow := ok(5, "w0.op5", 9)
	slow.TAcq = slow.T0 + int64(waitTimeout+stuckSlack+time.Second)
	unclear := event{Kind: "op", Op: 6, Owner: "w0.op6", T0: 1, TAcq: 2, AcqClass: "other", AcqErr: "boom"}
	r.events = []event{ok(1, "w0.op1", 5), ok(2, "w0.op2", 5), ok(3, "w0.op3", 3), ok(4, "w0.op4", 7), slow, unclear, ok(6, "w0.op6b", 10)}
	// op 4: targeted by a pause, kept its lease; op 6 reported twice.

	res := r.check(0)
	all := strings.Join(res.violations, "\n")
	for _, want := range []string{
		"token 5 accepted twice",
		"token 3 accepted after token 5",
		"lost update",
		"inside at once",
		"kept its lease",
		"waited",
		"unclear error",
		"reported 2 times",
		"left over: key chaos:{res}",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the checker missed %q; it reported:\n%s", want, all)
		}
	}
	if res.stuck == 0 {
		t.Error("the checker counted no stuck waiter")
	}
}

// TestCheckerCatchesForceUnlockViolations feeds the checker a fabricated run
// with force-unlocks: a hold granted after one with an older token, an
// overlap it causes, a lock key renewed forever and a fencing counter without
// expiry, next to an overlap a force-unlock excuses and an arrival counter
// that expired.
func TestCheckerCatchesForceUnlockViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite skipped in -short mode")
	}
	t.Parallel()
	servers := redistest.NewN(t, 2)
	r := &run{
		t: t, sc: scenario{name: "selftest-force-unlock", kind: "mutex"},
		lock: servers[0], res: servers[1],
		targets:          map[string]targetFault{},
		leftoverPatience: 200 * time.Millisecond,
		forced:           []forceUnlock{{start: 100, end: 200, fence: 1000, deleted: true}, {start: 300, end: 400, fence: 5000, deleted: false}},
	}
	r.resRC = redistest.Client(t, r.res)
	r.cfg = workerConfig{Total: 9, Limit: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cmd := range [][]string{
		{"RPUSH", resLog, "1 990 w0.op1 0 1", "2 1065 w1.op2 1 2"},
		// op2 (new holder) entered while op1 (force-unlocked) was inside:
		// excused; op3 (stale) entered while op2 was inside: not excused.
		{"RPUSH", resExceed, "w1.op2 w0.op1 w1.op2", "w0.op3 w1.op2 w0.op3", "w1.op2 w3.op6 w1.op2", "w1.op2 w3.op7 w1.op2", "w1.op2 w2.op8 w1.op2",
			"w1.op2 w2.op9 w1.op2"},
		{"RPUSH", resReject, "991 w0.op3 read 1065", "992 w2.op4 read 1065", "993 w2.op5 read 1065",
			"994 w3.op6 read 1065", "995 w3.op7 read 1065", "996 w2.op8 read 1065", "997 w2.op9 read 1065"},
	} {
		if _, err := r.res.Do(ctx, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{
		{"SET", "chaos:{res}:fence", "1065"},
		{"SET", "chaos:{res}:seq", "7", "PX", "50"},
		{"HSET", "chaos:{res}", "w0:1", "1"},
		{"PEXPIRE", "chaos:{res}", "60000"},
		{"SET", "chaos:{res}:odd", "1"},
	} {
		if _, err := r.lock.Do(ctx, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	op := func(n int64, owner string, tok uint64, acq int64, cause string) event {
		return event{Kind: "op", Op: n, Owner: owner, Token: tok, T0: 1, TAcq: acq, TWrite: acq + 1, ReadOK: true, WriteOK: true, ReleaseClass: "ok", Cause: cause}
	}
	op1 := op(1, "w0.op1", 990, 50, "leaselost")
	op1.ReleaseClass = "lost"
	// op3: a stale pass 10ms past the window after the first force-unlock,
	// whose release succeeded: the Client should have heard by then.
	op3 := op(3, "w0.op3", 991, 200+int64(forceUnlockWindow+10*time.Millisecond), "released")
	op3.ReadOK, op3.WriteOK = false, false
	// op4: a stale pass in the documented window (1ms after the first
	// force-unlock), never confirmed, its write refused: not a violation.
	op4 := op(4, "w2.op4", 992, 200+int64(time.Millisecond), "leaselost")
	op4.ReleaseClass, op4.ReadOK, op4.WriteOK = "lost", false, false
	// op5: the same, but 1s later: the Client should have heard by then.
	op5 := op(5, "w2.op5", 993, 200+int64(time.Second), "leaselost")
	op5.ReleaseClass, op5.ReadOK, op5.WriteOK = "lost", false, false
	// op6: inside when the first force-unlock ran, it released (a local
	// pass) 2ms after it, before its Client could hear: the window.
	op6 := op(6, "w3.op6", 994, 60, "released")
	op6.TEnd, op6.ReadOK, op6.WriteOK = 200+int64(2*time.Millisecond), false, false
	// op7: the same, but it released 1s later and was never told.
	op7 := op(7, "w3.op7", 995, 70, "released")
	op7.TEnd, op7.ReadOK, op7.WriteOK = 200+int64(time.Second), false, false
	// op8: a pass in the window (2ms after the first force-unlock) that
	// released before its Client heard, inside when op2 entered: the
	// window, under fencing (its token is below op2's).
	op8 := op(8, "w2.op8", 996, 200+int64(2*time.Millisecond), "released")
	op8.TEnd, op8.ReadOK, op8.WriteOK = 200+int64(3*time.Millisecond), false, false
	// op9: a pass made while the first force-unlock ran (its Client could
	// not have heard), inside when op2 entered: the window too.
	op9 := op(9, "w2.op9", 997, 150, "released")
	op9.TEnd, op9.ReadOK, op9.WriteOK = 215, false, false
	r.events = []event{op1, op(2, "w1.op2", 1065, 210, "released"), op3, op4, op5, op6, op7, op8, op9}

	res := r.check(0)
	all := strings.Join(res.violations, "\n")
	for _, want := range []string{
		"stale token after force-unlock: w0.op3",
		"stale token after force-unlock: w2.op5",
		"w3.op7 (token 995, below w1.op2's 1065) never lost its lease",
		"after force-unlocks: w0.op3 (token 991) was granted the lock after a force-unlock",
		"left over: key chaos:{res} (hash) still there",
		"left over: key chaos:{res}:odd (string) without expiry",
		"left over: key chaos:{res}:fence (string) without expiry",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the checker missed %q; it reported:\n%s", want, all)
		}
	}
	for _, unwanted := range []string{"w1.op2 (op 2) granted", "[w0.op1 w1.op2]", ":seq ", "w2.op4", "w3.op6", "w2.op8", "w2.op9"} {
		if strings.Contains(all, unwanted) {
			t.Errorf("the checker reported %q, which is allowed; it reported:\n%s", unwanted, all)
		}
	}
	if res.overlaps != 4 || res.staleGrants != 5 || res.windowPasses != 4 {
		t.Errorf("overlaps %d (want 4), stale grants %d (want 5), in the window %d (want 4)", res.overlaps, res.staleGrants, res.windowPasses)
	}
}
