// Command relock shows who holds and who waits for the locks and semaphores
// of github.com/relockio/relock, live, and can force a lock free.
//
//	relock [flags] inspect NAME      holder(s), fencing counter, queue in order
//	relock [flags] list [PREFIX]     lock names (SCAN, never KEYS)
//	relock [flags] watch NAME        a live view, refreshed every 200ms
//	relock [flags] force-unlock NAME frees a Mutex whoever holds it
//
// Flags may come before or after the subcommand and its arguments; run
// `relock -h` for them. Install with
// `go install github.com/relockio/relock/cmd/relock@latest`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

// options are the flags of every subcommand.
type options struct {
	conn     connFlags
	kind     string
	json     bool
	yes      bool
	interval string
	count    int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0) // -h: the usage was asked for, and printed
		}
		fmt.Fprintln(os.Stderr, "relock:", err)
		os.Exit(2)
	}
}

// errNoCommand is run's error for a command line that names no command
// (after printing the usage).
var errNoCommand = errors.New("no command given")

const usage = `usage: relock [flags] COMMAND [ARGS]

commands:
  inspect NAME        holder(s), fencing counter and queue of a lock (-kind)
  list [PREFIX]       names of the locks whose names start with PREFIX
  watch NAME          a live view of a lock, with its hand-offs (Ctrl-C ends)
  force-unlock NAME   free a Mutex whoever holds it (asks to type NAME, or -yes)

flags:
`

func run(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("relock", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, usage); fs.PrintDefaults() }
	o.conn.register(fs)
	fs.StringVar(&o.kind, "kind", "mutex", "kind of lock: mutex, rw (RWMutex) or semaphore")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	fs.BoolVar(&o.yes, "yes", false, "force-unlock without asking")
	fs.StringVar(&o.interval, "interval", "200ms", "watch: refresh interval")
	fs.IntVar(&o.count, "count", 100, "list: SCAN COUNT hint per step")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return errNoCommand
	}
	c, closeAll, err := o.conn.connect()
	if err != nil {
		return err
	}
	defer closeAll()
	return dispatch(ctx, c, &o, pos, in, out)
}

// parseAnywhere parses flags wherever they are among the arguments and
// returns the others.
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func dispatch(ctx context.Context, c lockClient, o *options, pos []string, in io.Reader, out io.Writer) error {
	cmd, rest := pos[0], pos[1:]
	need := func(n int) error {
		if len(rest) != n {
			return fmt.Errorf("%s takes %d argument(s), got %d: %s", cmd, n, len(rest), strings.Join(rest, " "))
		}
		return nil
	}
	switch cmd {
	case "inspect":
		if err := need(1); err != nil {
			return err
		}
		return runInspect(ctx, c, o, rest[0], out)
	case "list":
		if len(rest) > 1 {
			return need(1)
		}
		return runList(ctx, c, o, strings.Join(rest, ""), out)
	case "watch":
		if err := need(1); err != nil {
			return err
		}
		return runWatch(ctx, c, o, rest[0], out)
	case "force-unlock":
		if err := need(1); err != nil {
			return err
		}
		return runForceUnlock(ctx, c, o, rest[0], in, out)
	}
	return fmt.Errorf("unknown command %q (inspect, list, watch, force-unlock)", cmd)
}
