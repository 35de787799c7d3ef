package main

import (
	"testing"
	"time"
)

// TestRatioFormatsFigures checks that a comparison with a zero figure, which
// has no ratio, prints both figures with their units rather than raw floats
// (the demo once printed "-5.52e-05 vs 0.0738").
func TestRatioFormatsFigures(t *testing.T) {
	for _, c := range []struct {
		a, b   float64
		format func(float64) string
		want   string
	}{
		{0, (73800 * time.Microsecond).Seconds(), fmtSeconds, "0s vs 73.8ms"},
		{0, 7.78, fmtPerSecond, "0.00/s vs 7.78/s"},
		{0.1, 0, fmtPerAcq, "0.1 per acquisition vs 0.0 per acquisition"},
		{0, 0, fmtSeconds, "both zero"},
		{0.0005, 0.0738, fmtSeconds, "148x sooner"},
		{1.0, 1.01, fmtPerSecond, "about the same"},
	} {
		if got := ratio(c.a, c.b, "sooner", "later", c.format); got != c.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
