package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// view is what inspect prints, for every kind (the JSON of -json).
type view struct {
	Kind    string       `json:"kind"`
	Name    string       `json:"name"`
	Limit   *int64       `json:"limit,omitempty"` // semaphore
	Used    *int64       `json:"used,omitempty"`  // semaphore
	Fence   uint64       `json:"fence,omitempty"` // mutex, rw: the fencing counter
	Holders []holderView `json:"holders"`
	Queued  int          `json:"queued"`
	Waiters []waiterView `json:"waiters"`
}

type holderView struct {
	Client  string `json:"client"`
	Owner   string `json:"owner"`
	Mode    string `json:"mode,omitempty"` // rw: read or write
	Count   int64  `json:"count"`          // hold count; semaphore: permits
	Token   uint64 `json:"token,omitempty"`
	LeaseMS int64  `json:"lease_left_ms"`   // -1: no expiry; lapsed: -2 or less (see msOf)
	Claim   bool   `json:"claim,omitempty"` // a claim not yet extended (rlock.Holder.Claim)
}

type waiterView struct {
	Position   int    `json:"position"`
	Client     string `json:"client"`
	Owner      string `json:"owner"`
	Mode       string `json:"mode,omitempty"`
	Permits    int64  `json:"permits,omitempty"`
	WaitedMS   int64  `json:"waited_ms"`    // -1: unknown
	LapsesInMS int64  `json:"lapses_in_ms"` // unless it re-checks before; -1: no deadline; lapsed: -2 or less
}

// inspect reads one lock of kind into a view.
func inspect(ctx context.Context, c *rlock.Client, kind, name string) (view, error) {
	switch kind {
	case "mutex":
		info, err := c.Mutex(name).Inspect(ctx)
		return mutexView(info), err
	case "rw":
		info, err := c.RWMutex(name).Inspect(ctx)
		return rwView(info), err
	case "semaphore", "sem":
		info, err := semaphore.New(c, name).Inspect(ctx)
		return semView(info), err
	}
	return view{}, fmt.Errorf("-kind: %q is none of mutex, rw, semaphore", kind)
}

func mutexView(i rlock.LockInfo) view {
	v := view{Kind: "mutex", Name: i.Name, Fence: i.Fence, Queued: i.Queued, Holders: []holderView{}}
	if i.Holder != nil {
		v.Holders = append(v.Holders, holderOf(*i.Holder, ""))
	}
	v.Waiters = waitersOf(i.Waiters)
	return v
}

func rwView(i rlock.RWLockInfo) view {
	v := view{Kind: "rw", Name: i.Name, Fence: i.Fence, Queued: i.Queued, Holders: []holderView{}}
	if i.Writer != nil {
		v.Holders = append(v.Holders, holderOf(*i.Writer, "write"))
	}
	for _, r := range i.Readers {
		v.Holders = append(v.Holders, holderOf(r, "read"))
	}
	v.Waiters = waitersOf(i.Waiters)
	return v
}

func semView(i semaphore.Info) view {
	v := view{Kind: "semaphore", Name: i.Name, Limit: &i.Limit, Used: &i.Used, Queued: i.Queued, Holders: []holderView{}}
	for _, h := range i.Holders {
		v.Holders = append(v.Holders, holderOf(h, ""))
	}
	v.Waiters = waitersOf(i.Waiters)
	return v
}

func holderOf(h rlock.Holder, mode string) holderView {
	return holderView{Client: h.ClientID, Owner: h.Owner, Mode: mode, Count: h.Count, Token: h.Token, LeaseMS: msOf(h.LeaseLeft),
		Claim: h.Claim}
}

func waitersOf(ws []rlock.Waiter) []waiterView {
	out := make([]waiterView, len(ws))
	for i, w := range ws {
		out[i] = waiterView{Position: i + 1, Client: w.ClientID, Owner: w.Owner, Mode: w.Mode, Permits: w.Permits,
			WaitedMS: msOf(w.Waited), LapsesInMS: msOf(w.LapsesIn)}
	}
	return out
}

// msOf is d in whole milliseconds (truncated), with -1 kept for rlock's
// marker -1ns (no expiry, unknown, no deadline). A negative d, a lease or
// place that lapsed, is at most -2 (a lapse under 2ms reads -2), so that it
// never reads as the marker.
func msOf(d time.Duration) int64 {
	switch {
	case d == -1:
		return -1
	case d < 0:
		return min(d.Milliseconds(), -2)
	}
	return d.Milliseconds()
}

func writeJSON(w io.Writer, x any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(x)
}

// writeTable prints v for people.
func writeTable(w io.Writer, v view) {
	fmt.Fprintf(w, "%s %q", v.Kind, v.Name)
	if v.Limit != nil {
		fmt.Fprintf(w, "  limit %d  used %d", *v.Limit, *v.Used)
	}
	if v.Fence != 0 {
		fmt.Fprintf(w, "  fence %d", v.Fence)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(v.Holders) == 0 {
		fmt.Fprintln(tw, "HOLDER\t(none: free)")
	} else {
		fmt.Fprintln(tw, "HOLDER\tHOLD\tMODE\tCOUNT\tTOKEN\tLEASE LEFT\tCLAIM")
	}
	for _, h := range v.Holders {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", h.Client, holdID(h.Owner), dash(h.Mode), h.Count, tokenText(h.Token),
			leaseText(h.LeaseMS), claimText(h.Claim))
	}
	tw.Flush()
	fmt.Fprintf(w, "QUEUE: %d waiting\n", v.Queued)
	if len(v.Waiters) > 0 {
		fmt.Fprintln(tw, "#\tWAITER\tHOLD\tMODE\tPERMITS\tWAITED\tLAPSES IN")
	}
	for _, q := range v.Waiters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Position, q.Client, holdID(q.Owner), dash(q.Mode), permitsText(q.Permits), msText(q.WaitedMS), msText(q.LapsesInMS))
	}
	tw.Flush()
}

// holdID is the part of an owner field after its Client id.
func holdID(owner string) string {
	if i := strings.LastIndexByte(owner, ':'); i >= 0 {
		return owner[i+1:]
	}
	return owner
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func permitsText(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func label(mode, owner string) string {
	if mode == "" {
		return owner
	}
	return mode + " " + owner
}

func tokenText(t uint64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

// claimText marks a hold that is a claim not yet extended: its lease left is
// the claim window's.
func claimText(claim bool) string {
	if claim {
		return "claim"
	}
	return "-"
}

func leaseText(ms int64) string {
	if ms == -1 {
		return "no expiry"
	}
	return msText(ms)
}

func msText(ms int64) string {
	switch {
	case ms == -1:
		return "?"
	case ms < 0:
		return "lapsed"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Millisecond).String()
}

// holderKey identifies the holders of v, to notice hand-offs between views:
// their labels sorted, since Inspect lists semaphore holders and RWMutex
// readers by lease expiry, which renewals reorder while the holders stay.
func holderKey(v view) string {
	labels := make([]string, len(v.Holders))
	for i, h := range v.Holders {
		labels[i] = label(h.Mode, h.Owner)
	}
	slices.Sort(labels)
	return strings.Join(labels, ", ")
}
