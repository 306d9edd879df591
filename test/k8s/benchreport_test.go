//go:build e2enode

package k8se2e

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestBenchReportTargets checks make bench-k8s's targets on made-up
// samples: the kubelet's prepare falls back to the exact means when a
// median lies in its lowest bucket, and a ratio that could not be
// measured is a miss. It needs no node.
func TestBenchReportTargets(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// lowest is a kubelet histogram of n calls of mean sec, all in its
	// lowest bucket (100 ms).
	lowest := func(n int, sec float64) histogram {
		return histogram{bounds: []float64{0.1, math.Inf(1)}, counts: []float64{float64(n), float64(n)}, sum: sec * float64(n), count: float64(n)}
	}
	// at is a driver histogram of n calls between 5 and 10 ms (median
	// 7.5 ms) or between 10 and 25 ms (median 17.5 ms).
	at := func(n int, high bool) histogram {
		h := histogram{bounds: []float64{0.005, 0.01, 0.025, math.Inf(1)}, count: float64(n)}
		if high {
			h.counts = []float64{0, 0, float64(n), float64(n)}
		} else {
			h.counts = []float64{0, float64(n), float64(n), float64(n)}
		}
		return h
	}
	mk := func(floorBatch int, ourKubelet float64, metrics bool) report {
		r := report{runs: 1, batches: 1, size: 2, metrics: metrics, seq: map[kind]*phase{}, par: map[kind]*phase{}}
		for k, start := range map[kind]int{noClaim: 500, ourClaim: 520, floorClaim: 510} {
			batch := map[kind]int{noClaim: 1000, ourClaim: 1040, floorClaim: floorBatch}[k]
			s := sample{starts: []time.Duration{ms(start)}, kubeletPrepare: lowest(1, 0.01)}
			p := sample{starts: []time.Duration{ms(batch), ms(batch)}, all: ms(batch), kubeletPrepare: lowest(2, 0.01)}
			if k == ourClaim {
				s.kubeletPrepare, p.kubeletPrepare = lowest(1, ourKubelet), lowest(2, ourKubelet)
				s.driverPrepare, s.pluginADD = at(1, true), at(1, false)
				p.driverPrepare, p.pluginADD = at(2, false), at(2, false)
			}
			r.seq[k], r.par[k] = &phase{samples: []sample{s}}, &phase{samples: []sample{p}}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		r      report
		misses []string // a word of each miss
	}{
		{"all met", mk(1000, 0.02, true), nil},
		{"batch behind the floor's", mk(980, 0.02, true), []string{"the floor's"}},
		{"the kubelet's prepare over 2×", mk(1000, 0.021, true), []string{"prepare, mean"}},
		{"no metrics", mk(1000, 0.02, false), []string{"ADD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.r.misses()
			if len(got) != len(tc.misses) {
				t.Fatalf("misses %q, want %d", got, len(tc.misses))
			}
			for i, w := range tc.misses {
				if !strings.Contains(got[i], w) {
					t.Errorf("miss %q, want one with %q", got[i], w)
				}
			}
			if out := tc.r.String(); !strings.Contains(out, "| floor claim |") || strings.Count(out, "✓")+strings.Count(out, "✗") != 5 {
				t.Errorf("the table has no floor column or not 5 targets:\n%s", out)
			}
		})
	}
}
