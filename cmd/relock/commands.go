package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relockio/relock/rlock"
)

type lockClient = *rlock.Client

func runInspect(ctx context.Context, c lockClient, o *options, name string, out io.Writer) error {
	v, err := inspect(ctx, c, o.kind, name)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, v)
	}
	writeTable(out, v)
	return nil
}

// runList walks the whole SCAN iteration, one bounded step at a time.
func runList(ctx context.Context, c lockClient, o *options, prefix string, out io.Writer) error {
	all := []rlock.Listed{}
	cursor := ""
	for {
		page, next, err := c.List(ctx, prefix, cursor, o.count)
		if err != nil {
			return err
		}
		all = append(all, page...)
		if cursor = next; cursor == "" {
			break
		}
	}
	all = dedupe(all)
	if o.json {
		return writeJSON(out, all)
	}
	for _, l := range all {
		fmt.Fprintf(out, "%-10s %s\n", l.Kind, l.Name)
	}
	return nil
}

func dedupe(ls []rlock.Listed) []rlock.Listed {
	seen := map[rlock.Listed]bool{}
	out := ls[:0]
	for _, l := range ls {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

func runForceUnlock(ctx context.Context, c lockClient, o *options, name string, in io.Reader, out io.Writer) error {
	if o.kind != "mutex" {
		return fmt.Errorf("force-unlock frees a Mutex only, not -kind %s", o.kind)
	}
	m := c.Mutex(name)
	if !o.yes {
		fmt.Fprintf(out, "Force-unlocking %q takes it from its holder, who may still be working under it.\nType the lock name to confirm: ", name)
		line, _ := bufio.NewReader(in).ReadString('\n')
		if strings.TrimSpace(line) != name {
			return fmt.Errorf("not confirmed: nothing was changed")
		}
	}
	freed, err := m.ForceUnlock(ctx)
	if err != nil {
		return err
	}
	if freed {
		fmt.Fprintf(out, "%q was force-unlocked\n", name)
	} else {
		fmt.Fprintf(out, "%q was not locked\n", name)
	}
	return nil
}

// runWatch redraws the lock in place every interval until ctx ends, with a
// log of the last hand-offs (a change of holder between two refreshes).
func runWatch(ctx context.Context, c lockClient, o *options, name string, out io.Writer) error {
	every, err := time.ParseDuration(o.interval)
	if err != nil || every <= 0 {
		return fmt.Errorf("-interval: bad duration %q", o.interval)
	}
	var w watcher
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		v, err := inspect(ctx, c, o.kind, name)
		if ctx.Err() != nil {
			return nil
		}
		w.frame(out, v, err, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchLog is the number of hand-offs the live view keeps.
const watchLog = 8

type watcher struct {
	last    string
	started bool
	log     []string
}

// frame draws one screen: clear + home, the lock, then the hand-off log.
func (w *watcher) frame(out io.Writer, v view, err error, now time.Time) {
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	fmt.Fprintf(&b, "relock watch  %s\n\n", now.Format("15:04:05.000"))
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	} else {
		w.note(v, now)
		writeTable(&b, v)
	}
	b.WriteString("\nhand-offs:\n")
	for _, l := range w.log {
		b.WriteString(l + "\n")
	}
	io.WriteString(out, b.String())
}

func (w *watcher) note(v view, now time.Time) {
	cur := holderKey(v)
	if w.started && cur != w.last {
		line := now.Format("15:04:05.000") + "  "
		switch {
		case w.last == "":
			line += "taken by " + cur
		case cur == "":
			line += "released by " + w.last
		default:
			line += "hand-off " + w.last + " -> " + cur
		}
		w.log = append(w.log, line)
		if len(w.log) > watchLog {
			w.log = w.log[1:]
		}
	}
	w.started, w.last = true, cur
}
