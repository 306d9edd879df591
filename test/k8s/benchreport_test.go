//go:build e2enode

package k8se2e

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchReportTargets checks make bench-k8s's targets on made-up
// samples: pod start one at a time and in batches against the floor
// driver's, and the p99 of the kubelet's prepare calls to our driver in
// batches, which is a miss when the log had none. It needs no node.
func TestBenchReportTargets(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// calls are 99 calls of 5 ms and one of worst.
	calls := func(worst int) []time.Duration {
		out := slices.Repeat([]time.Duration{ms(5)}, 99)
		return append(out, ms(worst))
	}
	lowest := histogram{bounds: []float64{0.1, math.Inf(1)}, counts: []float64{1, 1}, sum: 0.01, count: 1}
	mk := func(seq, batch int, c []time.Duration) report {
		r := report{runs: 1, batches: 1, size: 2, metrics: true, seq: map[kind]*phase{}, par: map[kind]*phase{}}
		for k, start := range map[kind]int{noClaim: 500, ourClaim: seq, floorClaim: 500} {
			all := map[kind]int{noClaim: 1000, ourClaim: batch, floorClaim: 1000}[k]
			s := sample{starts: []time.Duration{ms(start)}, kubeletPrepare: lowest}
			p := sample{starts: []time.Duration{ms(all), ms(all)}, all: ms(all), kubeletPrepare: lowest}
			if k == ourClaim {
				p.calls = c
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
		{"all met", mk(525, 1100, calls(50)), nil},
		{"one at a time behind the floor's", mk(526, 1000, calls(5)), []string{"one at a time"}},
		{"a batch behind the floor's", mk(500, 1101, calls(5)), []string{"at once, all running"}},
		// The p99 of 100 calls is the 99th: one slow call is the p100.
		{"one slow call", mk(500, 1000, append(calls(5)[1:], ms(5), ms(400))), nil},
		{"two slow calls", mk(500, 1000, append(calls(51)[1:], ms(60))), []string{"p99"}},
		{"no calls logged", mk(500, 1000, nil), []string{"p99"}},
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
			if out := tc.r.String(); !strings.Contains(out, "| floor claim |") || strings.Count(out, "✓")+strings.Count(out, "✗") != 3 {
				t.Errorf("the table has no floor column or not 3 targets:\n%s", out)
			}
		})
	}
}

// TestCallsFromLog reads the driver's call lines in slog's and klog's
// text formats, and nothing else.
func TestCallsFromLog(t *testing.T) {
	log := `time=x level=INFO msg=call driver=tty.cdi-exec.io method=NodePrepareResources claims=1 took=3.2ms
time=x level=INFO msg=call driver=tty.cdi-exec.io method=NodeUnprepareResources claims=1 took=9ms
I1129 02:00:00.000000 1 driver.go:1] "call" driver="tty.cdi-exec.io" method="NodePrepareResources" claims=2 took="41.5ms"
time=x level=INFO msg=prepare driver=tty.cdi-exec.io took=7ms
`
	got := callsFromLog(t, log, "NodePrepareResources")
	want := []time.Duration{3200 * time.Microsecond, 41500 * time.Microsecond}
	if !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}
