package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// Inspect lists semaphore holders and RWMutex readers by lease expiry, which
// renewals reorder while the same holders hold: `relock watch` must not log
// that as a hand-off ("hand-off A, B -> B, A"). A real change still is one.
func TestWatchNoPhantomHandOff(t *testing.T) {
	a := rlock.Holder{Owner: "ca:1", ClientID: "ca", Count: 1, LeaseLeft: 4 * time.Second}
	b := rlock.Holder{Owner: "cb:1", ClientID: "cb", Count: 1, LeaseLeft: 5 * time.Second}
	c := rlock.Holder{Owner: "cc:1", ClientID: "cc", Count: 1, LeaseLeft: 6 * time.Second}
	for _, tc := range []struct {
		kind string
		of   func(hs ...rlock.Holder) view
	}{
		{"semaphore", func(hs ...rlock.Holder) view {
			return semView(semaphore.Info{Name: "s", Limit: 3, Used: int64(len(hs)), Holders: hs, NumHolders: len(hs)})
		}},
		{"rw", func(hs ...rlock.Holder) view {
			return rwView(rlock.RWLockInfo{Name: "rw", Readers: hs, NumReaders: len(hs)})
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			require.Equal(t, holderKey(tc.of(a, b)), holderKey(tc.of(b, a)), "the same holders in another order")
			var w watcher
			now := time.Now()
			for i := range 6 {
				if i%2 == 0 {
					w.note(tc.of(a, b), now)
				} else {
					w.note(tc.of(b, a), now)
				}
			}
			require.Empty(t, w.log, "the same two held throughout")
			w.note(tc.of(c, a), now)
			require.Len(t, w.log, 1, "b left and c came")
			require.True(t, strings.HasSuffix(w.log[0], "hand-off "+holderKey(tc.of(a, b))+" -> "+holderKey(tc.of(a, c))), w.log[0])
		})
	}
	// An RWMutex writer with readers: sorted as well, modes included.
	rw := func(readers ...rlock.Holder) view {
		return rwView(rlock.RWLockInfo{Name: "rw", Writer: &c, Readers: readers, NumReaders: len(readers)})
	}
	require.Equal(t, holderKey(rw(a, b)), holderKey(rw(b, a)))
	require.Equal(t, "read ca:1, read cb:1, write cc:1", holderKey(rw(b, a)))
}

// msOf keeps -1 for rlock's marker (-1ns: no expiry, unknown, no deadline)
// only: a lease or place that lapsed, however briefly, is -2 or less (it
// used to be -1 between 1ms and 2ms after it lapsed, and showed as "no
// expiry" or "?"). Other durations are truncated to whole milliseconds.
func TestMsOfMarkerUnambiguous(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-1, -1},
		{-time.Nanosecond - 1, -2},
		{-time.Microsecond, -2},
		{-time.Millisecond, -2},
		{-1500 * time.Microsecond, -2},
		{-2 * time.Millisecond, -2},
		{-2500 * time.Microsecond, -2},
		{-3 * time.Millisecond, -3},
		{-time.Hour, -3600000},
		{0, 0},
		{time.Microsecond, 0},
		{1500 * time.Microsecond, 1},
		{time.Second, 1000},
	} {
		require.Equal(t, tc.want, msOf(tc.d), "msOf(%v)", tc.d)
	}

	lapsed := -1500 * time.Microsecond
	h := holderOf(rlock.Holder{Owner: "c:1", ClientID: "c", Count: 1, LeaseLeft: lapsed}, "read")
	w := waitersOf([]rlock.Waiter{{Owner: "c:2", ClientID: "c", Waited: time.Second, LapsesIn: lapsed}})[0]
	require.Equal(t, "lapsed", leaseText(h.LeaseMS))
	require.Equal(t, "lapsed", msText(w.LapsesInMS))
	var b strings.Builder
	writeTable(&b, view{Kind: "rw", Name: "x", Holders: []holderView{h}, Queued: 1, Waiters: []waiterView{w}})
	require.NotContains(t, b.String(), "no expiry", b.String())
	requireRow(t, b.String(), "c", "1", "read", "1", "-", "lapsed")

	// The markers themselves, in the table and the JSON.
	none := holderOf(rlock.Holder{Owner: "c:1", ClientID: "c", Count: 1, LeaseLeft: -1}, "")
	unknown := waitersOf([]rlock.Waiter{{Owner: "c:2", ClientID: "c", Waited: -1, LapsesIn: -1}})[0]
	require.Equal(t, "no expiry", leaseText(none.LeaseMS))
	require.Equal(t, "?", msText(unknown.WaitedMS))
	require.Equal(t, "?", msText(unknown.LapsesInMS))
	out, err := json.Marshal(view{Kind: "mutex", Name: "x", Holders: []holderView{none, h}, Waiters: []waiterView{unknown, w}})
	require.NoError(t, err)
	for _, want := range []string{`"lease_left_ms":-1`, `"lease_left_ms":-2`, `"waited_ms":-1`, `"lapses_in_ms":-1`, `"lapses_in_ms":-2`} {
		require.Contains(t, string(out), want)
	}
}
