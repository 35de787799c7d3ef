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
