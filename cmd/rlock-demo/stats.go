package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relockio/relock/internal/measure"
)

// result is what one run measured.
type result struct {
	name       string
	clients    int
	elapsed    time.Duration
	acquired   int64            // successful Lock calls, counted locally
	perGo      []int64          // acquisitions of each goroutine; goroutine g used client g%clients
	waits      []time.Duration  // Lock call to success, one per acquisition
	longestCut time.Duration    // the longest wait still unfinished when the run ended
	idle       time.Duration    // mean time the lock sat free between a release and the next acquisition
	retaken    float64          // fraction of acquisitions by the goroutine that held the lock just before
	reqs       map[string]int64 // requests the lockers sent during the run, by command name
	lockReqs   int64            // their sum (the counter's GET and SET are not among them)
	cmds       map[string]int64 // commands the server ran during the run, by name, including inside scripts
	allCmds    int64            // their sum
	lockCmds   int64            // allCmds less the counter's GET and SET
	counter    int64            // the shared counter's final value in Redis
}

func (r *result) rate() float64 { return float64(r.acquired) / r.elapsed.Seconds() }

// lost is how many read-modify-write updates of the counter went missing. Only
// a lock that let two holders in at once can lose one.
func (r *result) lost() int64 { return r.acquired - r.counter }

func (r *result) perAcq(n int64) float64 {
	if r.acquired == 0 {
		return 0
	}
	return float64(n) / float64(r.acquired)
}

// sortedWaits returns the completed waits in increasing order.
func (r *result) sortedWaits() []time.Duration {
	w := slices.Clone(r.waits)
	slices.Sort(w)
	return w
}

// starved is how many goroutines never got the lock.
func (r *result) starved() int {
	n := 0
	for _, x := range r.perGo {
		if x == 0 {
			n++
		}
	}
	return n
}

// topClientShare is the busiest client's fraction of all acquisitions; with
// fair hand-offs it would be about 1/clients.
func (r *result) topClientShare() float64 {
	per := make([]int64, r.clients)
	for g, x := range r.perGo {
		per[g%r.clients] += x
	}
	if r.acquired == 0 {
		return 0
	}
	return float64(slices.Max(per)) / float64(r.acquired)
}

// printTable prints the hot-phase runs side by side, one row per measure.
func printTable(rs ...*result) {
	waits := make([][]time.Duration, len(rs))
	for i, r := range rs {
		waits[i] = r.sortedWaits()
	}
	t := newTable(len(rs))
	row := func(label string, cell func(i int, r *result) string) {
		t.row(label, func(i int) string { return cell(i, rs[i]) })
	}
	row("", func(_ int, r *result) string { return r.name })
	row("acquisitions/s", func(_ int, r *result) string { return fmt.Sprintf("%.0f", r.rate()) })
	row("acquisitions", func(_ int, r *result) string { return fmt.Sprint(r.acquired) })
	row("wait p50 (Lock called to held; see notes)", func(i int, _ *result) string { return fmtDur(measure.Percentile(waits[i], 0.5)) })
	row("wait p99", func(i int, _ *result) string { return fmtDur(measure.Percentile(waits[i], 0.99)) })
	row("wait max", func(i int, r *result) string { return fmtMaxWait(r, waits[i]) })
	row("lock idle between holders (mean)", func(_ int, r *result) string { return fmtDur(r.idle) })
	row("lock requests sent / acquisition", func(_ int, r *result) string { return fmt.Sprintf("%.1f", r.perAcq(r.lockReqs)) })
	row("  plus the counter's GET+SET", func(_ int, r *result) string { return fmt.Sprintf("%.1f", r.perAcq(r.lockReqs+2*r.acquired)) })
	row("commands Redis ran for the lock / acquisition", func(_ int, r *result) string { return fmt.Sprintf("%.1f", r.perAcq(r.lockCmds)) })
	row("counter", func(_ int, r *result) string { return fmtCounter(r.lost()) })
	row("fairness (Jain index, 1.00 = even)", func(_ int, r *result) string { return fmt.Sprintf("%.2f", measure.Jain(r.perGo)) })
	row("goroutines never served", func(_ int, r *result) string { return fmt.Sprintf("%d of %d", r.starved(), len(r.perGo)) })
	row("busiest client's share", func(_ int, r *result) string { return fmt.Sprintf("%.0f%%", 100*r.topClientShare()) })
	t.print()
}

// printHotNotes explains the rows of the hot table that read wrongly at first
// sight, with the run's own numbers.
func printHotNotes(mutex, spin *result) {
	fmt.Println("notes:")
	wait := fmt.Sprintf("wait: from calling Lock to holding the lock. %s serves the waiters in turn, so each waits for "+
		"the holds queued ahead of it", mutex.name)
	if mutex.acquired > 0 {
		perHold := mutex.elapsed / time.Duration(mutex.acquired)
		p50 := measure.Percentile(mutex.sortedWaits(), 0.5)
		wait += fmt.Sprintf(" (p50 %s: about %.0f acquisitions, one every %s)", fmtDur(p50), float64(p50)/float64(max(perHold, 1)), fmtDur(perHold))
	}
	wait += fmt.Sprintf(". The spin loop lets whoever retries first barge in: %.0f%% of its acquisitions went to the "+
		"goroutine that had just released the lock, after next to no wait, which keeps its p50 low while the others wait "+
		"for whole backoff steps or are never served.", 100*spin.retaken)
	printNote(wait)
	printNote("lock requests: the commands the lock clients sent, counted in a wrapper around rueidis.Client, a " +
		"script call counting one; the counter's GET and SET (2 per acquisition) are left out, then added.")
	printNote("commands Redis ran: from INFO commandstats, every command a script runs counting one; the counter's " +
		"GET and SET are left out.")
}

// noteWidth is where printNote wraps its lines.
const noteWidth = 100

// printNote prints text as an indented paragraph wrapped at noteWidth.
func printNote(text string) {
	line, indent := "  ", "    "
	for _, w := range strings.Fields(text) {
		if utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > noteWidth && strings.TrimSpace(line) != "" {
			fmt.Println(line)
			line = indent
		} else if strings.TrimSpace(line) != "" {
			line += " "
		}
		line += w
	}
	fmt.Println(line)
}

// printBlockedTable prints the blocked-waiters runs side by side.
func printBlockedTable(bs ...*blockedResult) {
	t := newTable(len(bs))
	row := func(label string, cell func(b *blockedResult) string) {
		t.row(label, func(i int) string { return cell(bs[i]) })
	}
	row("", func(b *blockedResult) string { return b.name })
	row("blocked waiters", func(b *blockedResult) string { return fmt.Sprint(b.waiters) })
	row("requests / waiter / s while blocked", func(b *blockedResult) string { return fmt.Sprintf("%.2f", b.perWaiterRate()) })
	row("  all waiters, requests/s", func(b *blockedResult) string {
		return fmt.Sprintf("%.0f", float64(b.reqs)/max(b.window.Seconds(), 1e-9))
	})
	row("first waiter has it, after Unlock was called", func(b *blockedResult) string { return fmtDur(b.wake) })
	row("every waiter served, after Unlock was called", func(b *blockedResult) string { return fmtDur(b.drain) })
	row("counter", func(b *blockedResult) string { return fmtCounter(b.lost()) })
	t.print()
}

// fmtMaxWait is the longest wait of a run. A goroutine still waiting at the
// end waited at least as long as it had so far; a starved goroutine would
// otherwise not show up at all.
func fmtMaxWait(r *result, sorted []time.Duration) string {
	if m := measure.Percentile(sorted, 1); m >= r.longestCut {
		return fmtDur(m)
	}
	return "≥" + fmtDur(r.longestCut) + " (unfinished)"
}

func fmtCounter(lost int64) string {
	if lost == 0 {
		return "exact"
	}
	return fmt.Sprintf("LOST %d UPDATES", lost)
}

// table collects rows of a label and one cell per column, and prints each
// column right-aligned to its widest cell.
type table struct {
	cols int
	rows [][]string
}

func newTable(cols int) *table { return &table{cols: cols} }

func (t *table) row(label string, cell func(i int) string) {
	cells := []string{label}
	for i := range t.cols {
		cells = append(cells, cell(i))
	}
	t.rows = append(t.rows, cells)
}

func (t *table) print() {
	widths := make([]int, t.cols+1)
	for _, cells := range t.rows {
		for i, c := range cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, cells := range t.rows {
		line := fmt.Sprintf("%-*s", widths[0], cells[0])
		for i, c := range cells[1:] {
			line += fmt.Sprintf("   %*s", widths[i+1], c) // fmt pads by runes, like the widths
		}
		fmt.Println(strings.TrimRight(line, " "))
	}
}

// printCommands lists a run's requests and commands per acquisition, most
// frequent first, for readers who want to know where the counts come from.
func printCommands(r *result) {
	fmt.Printf("%s, per acquisition (counter GET+SET excluded from requests, included in commands):\n", r.name)
	fmt.Printf("  %-34s %s\n", "Redis requests sent", "commands run in Redis")
	reqs, cmds := byCount(r.reqs), byCount(r.cmds)
	for i := range max(len(reqs), len(cmds)) {
		left, right := "", ""
		if i < len(reqs) {
			left = fmt.Sprintf("%-16s %7.2f", strings.ToLower(reqs[i]), r.perAcq(r.reqs[reqs[i]]))
		}
		if i < len(cmds) {
			right = fmt.Sprintf("%-16s %7.2f", cmds[i], r.perAcq(r.cmds[cmds[i]]))
		}
		fmt.Printf("  %-34s %s\n", left, right)
	}
}

// byCount returns the names of m, highest count first.
func byCount(m map[string]int64) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
}

// fmtDur rounds d to about three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// interpret prints a few sentences that read the tables for the reader. Every
// comparison is computed from the numbers, so it stays true when they change.
func interpret(mutex, spin *result, bm, bs *blockedResult) {
	// Blocked waiters: what waiting costs Redis.
	spinAll := float64(bs.reqs) / max(bs.window.Seconds(), 1e-9)
	if bm.reqs == 0 {
		fmt.Printf("Blocked: while the lock was held, the %d %s waiters sent no requests at all; the %d spinning waiters sent %.2f requests/s each, %.0f/s in all.\n",
			bm.waiters, mutex.name, bs.waiters, bs.perWaiterRate(), spinAll)
	} else {
		fmt.Printf("Blocked: while the lock was held, each %s waiter sent %.2f requests/s, each spinning waiter %.2f/s (%s: %s), %.0f/s in all.\n",
			mutex.name, bm.perWaiterRate(), bs.perWaiterRate(), mutex.name,
			ratio(bm.perWaiterRate(), bs.perWaiterRate(), "fewer", "more", fmtPerSecond), spinAll)
	}

	// Wake-up: how soon a release is noticed.
	fmt.Printf("Wake-up: the first waiter had the lock %s after the holder called Unlock with %s, %s spinning (%s: %s); "+
		"a spinning waiter only notices at its next poll, up to %v apart with this backoff. All %d waiters had had it once after %s and %s.\n",
		fmtDur(bm.wake), mutex.name, fmtDur(bs.wake), mutex.name, ratio(bm.wake.Seconds(), bs.wake.Seconds(), "sooner", "later", fmtSeconds),
		measure.SpinMaxBackoff, bm.waiters, fmtDur(bm.drain), fmtDur(bs.drain))

	// Starvation under the hot load.
	fmt.Printf("Starvation: under the hot load %d of %d goroutines never got the lock with %s, %d spinning; the longest wait was %s and %s.\n",
		mutex.starved(), len(mutex.perGo), mutex.name, spin.starved(),
		fmtMaxWait(mutex, mutex.sortedWaits()), fmtMaxWait(spin, spin.sortedWaits()))

	// Requests per acquisition.
	mr, sr := mutex.perAcq(mutex.lockReqs), spin.perAcq(spin.lockReqs)
	fmt.Printf("Requests: under the hot load %s sent %.1f Redis requests per acquisition, the spin lock %.1f (%s: %s)",
		mutex.name, mr, sr, mutex.name, ratio(mr, sr, "fewer", "more", fmtPerAcq))
	if mr > 1.05*sr {
		fmt.Printf("; the spin lock needs fewer here. A release wakes one waiter in each of the %d %s clients, and all but one find the lock taken again",
			mutex.clients, mutex.name)
	}
	fmt.Printf(". Counting the commands run inside scripts, Redis ran %.1f and %.1f commands per acquisition.\n",
		mutex.perAcq(mutex.lockCmds), spin.perAcq(spin.lockCmds))

	// Throughput.
	fmt.Printf("Throughput: %s made %.0f acquisitions/s, the spin lock %.0f (%s: %s)",
		mutex.name, mutex.rate(), spin.rate(), mutex.name, ratio(mutex.rate(), spin.rate(), "fewer", "more", fmtPerSecond))
	if spin.rate() > 1.05*mutex.rate() {
		fmt.Print("; the spin lock wins here")
	}
	fmt.Printf(". The lock sat idle %s between holders with %s, %s spinning; %.0f%% of spin acquisitions went to the goroutine that had just released the lock "+
		"(no hand-off at all), %.0f%% of %s's.\n",
		fmtDur(mutex.idle), mutex.name, fmtDur(spin.idle), 100*spin.retaken, 100*mutex.retaken, mutex.name)

	// Fairness across clients.
	even := 1 / float64(mutex.clients)
	if mutex.clients > 1 && mutex.topClientShare() > 1.5*even {
		fmt.Printf("Fairness: one %s client got %.0f%% of the hot acquisitions (an even split is %.0f%%). Clients take turns in Redis's "+
			"queue, and within a turn a client's goroutines pass the lock among themselves for a few holds, so the shares even out "+
			"over turns, not holds.\n", mutex.name, 100*mutex.topClientShare(), 100*even)
	} else {
		fmt.Printf("Fairness: the busiest %s client got %.0f%% of the hot acquisitions (an even split is %.0f%%).\n",
			mutex.name, 100*mutex.topClientShare(), 100*even)
	}
}

// ratio says how a compares to b: "3.2x fewer", "1.5x more", "about the
// same", or, when one of them is zero, both figures written by format, as in
// "0/s vs 12.3/s".
func ratio(a, b float64, less, more string, format func(float64) string) string {
	switch {
	case a == 0 && b == 0:
		return "both zero"
	case a <= 0 || b <= 0:
		return format(a) + " vs " + format(b)
	case max(a, b)/min(a, b) < 1.05:
		return "about the same"
	case a < b:
		return fmtX(b/a) + " " + less
	default:
		return fmtX(a/b) + " " + more
	}
}

// fmtX formats a ratio with about two significant digits: "1.3x", "257x".
func fmtX(x float64) string {
	if x < 10 {
		return fmt.Sprintf("%.1fx", x)
	}
	return fmt.Sprintf("%.0fx", x)
}

// Formats of ratio's figures, with their units.
func fmtSeconds(x float64) string   { return fmtDur(time.Duration(x * float64(time.Second))) }
func fmtPerSecond(x float64) string { return fmt.Sprintf("%.2f/s", x) }
func fmtPerAcq(x float64) string    { return fmt.Sprintf("%.1f per acquisition", x) }
