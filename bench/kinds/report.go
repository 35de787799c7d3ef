package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// report prints a point's table: the kind under test first, then each
// baseline and peer, with its throughput as a multiple of the best peer's.
func report(w io.Writer, res pointResult) {
	fmt.Fprintf(w, "\n%s  (medians of the rounds)\n", res.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"contender", "ops/s", "x best peer", "x own baseline", "read-op wait p50", "p99", "write/exclusive wait p50", "p99", "max", "cmd/op", "jain", "violations", "errors", ""}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	best, own := 0.0, 0.0
	for _, c := range res.Contenders[1:] {
		switch {
		case c.Own:
			own = c.OpsPerSec
		case c.Errors == 0 && c.Violations == 0:
			best = max(best, c.OpsPerSec)
		}
	}
	for i, c := range res.Contenders {
		ratio, ownRatio := "-", "-"
		if i == 0 && best > 0 {
			ratio = fmt.Sprintf("%.2fx", c.OpsPerSec/best)
		}
		if i == 0 && own > 0 {
			ownRatio = fmt.Sprintf("%.2fx", c.OpsPerSec/own)
		}
		read := []string{"-", "-"}
		if c.ReadP50 > 0 || c.ReadP99 > 0 {
			read = []string{msf(c.ReadP50), msf(c.ReadP99)}
		}
		fmt.Fprintln(tw, strings.Join([]string{c.Name, fmt.Sprintf("%.0f", c.OpsPerSec), ratio, ownRatio, read[0], read[1],
			msf(c.WriteP50), msf(c.WriteP99), msf(c.WriteMax), fmt.Sprintf("%.1f", c.CmdsPerOp),
			fmt.Sprintf("%.2f", c.Jain), fmt.Sprint(c.Violations), fmt.Sprint(c.Errors), ""}, "\t"))
	}
	_ = tw.Flush()
	for _, c := range res.Contenders {
		if c.ErrorSample != "" {
			fmt.Fprintf(w, "  %s: first error: %s\n", c.Name, c.ErrorSample)
		}
	}
	for _, c := range res.Contenders {
		kind := "peer"
		if c.Own {
			kind = "rlock baseline"
		} else if c.Name == res.Contenders[0].Name {
			kind = "under test"
		}
		fmt.Fprintf(w, "  %s (%s): %s\n", c.Name, kind, c.Config)
	}
}

// msf formats milliseconds.
func msf(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%.1fms", ms)
	default:
		return fmt.Sprintf("%.0fµs", ms*1000)
	}
}
