package report

import (
	"fmt"
	"slices"
)

// The figures of a run come from interleaved rounds: coord's child, then
// etcd's, then coord's again, so a change in the machine's load between
// two children lands in one round's pair, not in every figure. A side's
// figure is its median over the rounds; the ratio is the median of the
// rounds' own ratios (coord's round i over etcd's round i), whose range
// says how far the machine moved it.

// Median returns the median of vs (the mean of the two middle values when
// there is an even number of them), leaving vs as it was; false when vs
// is empty.
func Median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// PairedRatios returns coord[i]/etcd[i] for every round i that both sides
// measured (nil: a side lacks the round) where etcd's value is positive
// and coord's not negative (a ratio of negative values, differences of
// two figures, says nothing), in round order.
func PairedRatios(coord, etcd []*float64) []float64 {
	var out []float64
	for i := range min(len(coord), len(etcd)) {
		if coord[i] != nil && etcd[i] != nil && *etcd[i] > 0 && *coord[i] >= 0 {
			out = append(out, *coord[i] / *etcd[i])
		}
	}
	return out
}

// Spread is the median and range of a figure's paired ratios.
type Spread struct {
	Median, Min, Max float64
	// N is the number of ratios (rounds both sides measured).
	N int
}

// SpreadOf returns the spread of ratios; false when there are none.
func SpreadOf(ratios []float64) (Spread, bool) {
	med, ok := Median(ratios)
	if !ok {
		return Spread{}, false
	}
	return Spread{Median: med, Min: slices.Min(ratios), Max: slices.Max(ratios), N: len(ratios)}, true
}

// Level reports whether the range crosses 1.0x (or touches it): across
// the rounds neither side was always ahead, so the median's side of 1.0x
// is not a result. One round has no range and is never level.
func (s Spread) Level() bool { return s.N >= 2 && s.Min <= 1 && s.Max >= 1 }

// Range describes the range as "min-maxx", or "1 round".
func (s Spread) Range() string {
	if s.N < 2 {
		return fmt.Sprintf("%d round", s.N)
	}
	lo := ratio(&s.Min)
	return lo[:len(lo)-1] + "-" + ratio(&s.Max)
}

// allZero reports whether every present value of vs is 0.
func allZero(vs []*float64) bool {
	for _, v := range vs {
		if v != nil && *v != 0 {
			return false
		}
	}
	return true
}

// values returns the present values of vs.
func values(vs []*float64) []float64 {
	var out []float64
	for _, v := range vs {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out
}
