//go:build e2enode

package k8se2e

import (
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// histogram is one series of a Prometheus histogram: its cumulative
// buckets by upper bound (ascending, +Inf last), its sum and its count.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative, one per bound
	sum    float64
	count  float64
}

// histograms parses the Prometheus text exposition format (with the
// Prometheus parser, expfmt) and returns the series of the histogram name
// whose labels keep accepts, merged into one (as sum without (...) would):
// the bench reads one driver's or one method's latency. It is empty
// (count 0) when the text has none.
func histograms(text, name string, keep func(labels map[string]string) bool) (histogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return histogram{}, err
	}
	var h histogram
	buckets := map[float64]float64{}
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.Histogram == nil || !keep(labels) {
			continue
		}
		h.sum += m.Histogram.GetSampleSum()
		h.count += float64(m.Histogram.GetSampleCount())
		inf := false
		for _, b := range m.Histogram.GetBucket() {
			buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf { // the +Inf bucket is the count
			buckets[math.Inf(1)] += float64(m.Histogram.GetSampleCount())
		}
	}
	for _, le := range slices.Sorted(maps.Keys(buckets)) {
		h.bounds = append(h.bounds, le)
		h.counts = append(h.counts, buckets[le])
	}
	return h, nil
}

// minus is h less an earlier scrape of the same series: what was
// observed between the two.
func (h histogram) minus(before histogram) histogram {
	out := histogram{bounds: h.bounds, sum: h.sum - before.sum, count: h.count - before.count}
	for i, le := range h.bounds {
		c := h.counts[i]
		if j := slices.Index(before.bounds, le); j >= 0 {
			c -= before.counts[j]
		}
		out.counts = append(out.counts, c)
	}
	return out
}

// mean is the exact mean of the observations (sum over count).
func (h histogram) mean() float64 {
	if h.count == 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linearly within the bucket that holds it, the lowest bucket
// starting at 0; within the +Inf bucket it is the highest finite bound.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.counts[len(h.counts)-1]
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.bounds[i-1]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.bounds[i-1], h.counts[i-1]
		}
		if c == below {
			return h.bounds[i]
		}
		return lo + (h.bounds[i]-lo)*(rank-below)/(c-below)
	}
	return h.bounds[len(h.bounds)-1]
}

// metricSum parses the Prometheus text exposition format and sums the
// values of the counter, gauge or untyped series of name whose labels
// include match: the API server's requests, or its open watches of one
// resource.
func metricSum(text, name string, match map[string]string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		keep := true
		for k, v := range match {
			keep = keep && labels[k] == v
		}
		if !keep {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, nil
}
