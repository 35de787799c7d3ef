package measure

import "math"

// Percentile returns the p-th percentile (0..1) of sorted by nearest rank, and
// zero for an empty slice.
func Percentile[T ~int64](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Jain is Jain's fairness index of xs (acquisitions per goroutine): 1 when
// all are equal, 1/n when one took everything, 0 when nobody got anything.
func Jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}
