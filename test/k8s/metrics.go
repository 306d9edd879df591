//go:build e2enode

package k8se2e

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// histogram is one series of a Prometheus histogram: its cumulative
// buckets by upper bound (ascending, +Inf last), its sum and its count.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative, one per bound
	sum    float64
	count  float64
}

// histograms parses the Prometheus text exposition format and returns
// the series of the histogram name whose labels keep accepts, merged into
// one (as sum without (...) would): the bench reads one driver's or one
// method's latency. It is empty (count 0) when the text has none.
func histograms(text, name string, keep func(labels map[string]string) bool) (histogram, error) {
	var h histogram
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	buckets := map[float64]float64{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, err := splitSample(line)
		if err != nil {
			return histogram{}, err
		}
		metric, labels, _ := strings.Cut(series, "{")
		suffix, ok := strings.CutPrefix(metric, name)
		if !ok || (suffix != "_bucket" && suffix != "_sum" && suffix != "_count") {
			continue
		}
		ls, err := parseLabels(strings.TrimSuffix(labels, "}"))
		if err != nil {
			return histogram{}, fmt.Errorf("%s: %w", line, err)
		}
		if !keep(ls) {
			continue
		}
		switch suffix {
		case "_sum":
			h.sum += value
		case "_count":
			h.count += value
		default:
			le, err := strconv.ParseFloat(ls["le"], 64)
			if err != nil {
				return histogram{}, fmt.Errorf("%s: le: %w", line, err)
			}
			buckets[le] += value
		}
	}
	if err := sc.Err(); err != nil {
		return histogram{}, err
	}
	for _, le := range slices.Sorted(maps.Keys(buckets)) {
		h.bounds = append(h.bounds, le)
		h.counts = append(h.counts, buckets[le])
	}
	return h, nil
}

// splitSample splits a sample line into its series (name and labels) and its
// value; a timestamp after the value is ignored.
func splitSample(line string) (string, float64, error) {
	end := strings.LastIndexByte(line, '}')
	if end < 0 {
		end = strings.IndexByte(line, ' ') - 1
		if end < 0 {
			return "", 0, fmt.Errorf("a sample without a value: %q", line)
		}
	}
	fields := strings.Fields(line[end+1:])
	if len(fields) == 0 {
		return "", 0, fmt.Errorf("a sample without a value: %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", line, err)
	}
	return line[:end+1], v, nil
}

// parseLabels parses `a="x",b="y"` with the format's escapes.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; {
		name, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return nil, fmt.Errorf("bad labels at %q", s)
		}
		var b strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					b.WriteByte('\n')
					continue
				}
			}
			b.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return nil, fmt.Errorf("unterminated label value at %q", s)
		}
		out[strings.TrimSpace(name)] = b.String()
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest[i+1:]), ","))
	}
	return out, nil
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
