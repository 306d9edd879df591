//go:build e2enode

package k8se2e

import (
	"math"
	"testing"
	"time"
)

// TestBenchMetricsHistograms checks the bench's reading of the text format:
// series merged by label, a difference of two scrapes, the exact mean and
// the estimated quantiles. It needs no node.
func TestBenchMetricsHistograms(t *testing.T) {
	const before = `# HELP x_seconds A histogram.
# TYPE x_seconds histogram
x_seconds_bucket{driver="a",le="0.01"} 1
x_seconds_bucket{driver="a",le="0.1"} 2
x_seconds_bucket{driver="a",le="+Inf"} 2
x_seconds_sum{driver="a"} 0.06
x_seconds_count{driver="a"} 2
x_seconds_bucket{driver="b\"q",le="0.01"} 7
x_seconds_bucket{driver="b\"q",le="0.1"} 7
x_seconds_bucket{driver="b\"q",le="+Inf"} 7
x_seconds_sum{driver="b\"q"} 0.01
x_seconds_count{driver="b\"q"} 7
# TYPE x_total counter
x_total 3
`
	const after = `# TYPE x_seconds histogram
x_seconds_bucket{driver="a",le="0.01"} 1
x_seconds_bucket{driver="a",le="0.1"} 6
x_seconds_bucket{driver="a",le="+Inf"} 12 1700000000000
x_seconds_sum{driver="a"} 5.06
x_seconds_count{driver="a"} 12
`
	keepA := func(l map[string]string) bool { return l["driver"] == "a" }
	b, err := histograms(before, "x_seconds", keepA)
	if err != nil {
		t.Fatal(err)
	}
	a, err := histograms(after, "x_seconds", keepA)
	if err != nil {
		t.Fatal(err)
	}
	d := a.minus(b)
	if d.count != 10 || math.Abs(d.sum-5) > 1e-9 || math.Abs(d.mean()-0.5) > 1e-9 {
		t.Fatalf("the difference has count %v sum %v mean %v, want 10, 5, 0.5", d.count, d.sum, d.mean())
	}
	// Four of the ten in (0.01, 0.1], six above: the median is in +Inf,
	// so the highest finite bound; the 0.2-quantile is half-way into
	// the second bucket.
	if q := d.quantile(.5); q != 0.1 {
		t.Errorf("median %v, want 0.1", q)
	}
	if q := d.quantile(.2); math.Abs(q-0.055) > 1e-9 {
		t.Errorf("0.2-quantile %v, want 0.055", q)
	}
	q, err := histograms(before, "x_seconds", func(l map[string]string) bool { return l["driver"] == `b"q` })
	if err != nil {
		t.Fatal(err)
	}
	if q.count != 7 || math.Abs(q.quantile(.9)-0.009) > 1e-9 {
		t.Errorf("the escaped label's series: count %v, p90 %v", q.count, q.quantile(.9))
	}
	all, err := histograms(before, "x_seconds", func(map[string]string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if all.count != 9 || len(all.bounds) != 3 || all.counts[0] != 8 {
		t.Errorf("merged: count %v, bounds %v, counts %v; want 9, three bounds, 8 in the first", all.count, all.bounds, all.counts)
	}
	none, err := histograms(before, "y_seconds", keepA)
	if err != nil {
		t.Fatal(err)
	}
	if none.count != 0 || !math.IsNaN(none.mean()) || !math.IsNaN(none.quantile(.5)) {
		t.Errorf("a missing histogram: %+v", none)
	}
	if _, err := histograms(`x_seconds_bucket{driver="a} 1`, "x_seconds", keepA); err == nil {
		t.Error("an unterminated label value parsed")
	}
}

// TestBenchTookFromLog checks the bench's reading of the driver's prepare and
// unprepare times in slog's text format and in klog's, and that failures
// are not counted.
func TestBenchTookFromLog(t *testing.T) {
	const log = `time=2026-11-26T06:13:47Z level=INFO msg=prepare driver=tty.cdi-exec.io claim=default/a uid=1 devices=[tty40] took=14ms
time=2026-11-26T06:13:47Z level=ERROR msg="prepare failed" driver=tty.cdi-exec.io took=3ms err=x
time=2026-11-26T06:13:48Z level=INFO msg=unprepare driver=tty.cdi-exec.io claim=default/a uid=1 took=8ms held=true
I1126 06:13:49.000000       1 prepare.go:68] "prepare" driver="tty.cdi-exec.io" claim="default/b" took="1.5s"
E1126 06:13:49.000000       1 prepare.go:64] "prepare failed" driver="tty.cdi-exec.io" took="2ms"
I1126 06:13:50.000000       1 prepare.go:290] "unprepare" driver="tty.cdi-exec.io" claim="default/b" uid="2" took="900µs" held=true
`
	prep, unprep := tookFromLog(t, log, "prepare"), tookFromLog(t, log, "unprepare")
	if len(prep) != 2 || prep[0] != 14*time.Millisecond || prep[1] != 1500*time.Millisecond {
		t.Errorf("prepares %v, want [14ms 1.5s]", prep)
	}
	if len(unprep) != 2 || unprep[0] != 8*time.Millisecond || unprep[1] != 900*time.Microsecond {
		t.Errorf("unprepares %v, want [8ms 900µs]", unprep)
	}
}

// TestBenchMetricSum checks the reading of the API server's counters and
// gauges: the series whose labels include the ones asked for, summed.
// It needs no node.
func TestBenchMetricSum(t *testing.T) {
	const text = `# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="resource.k8s.io",resource="resourceclaims",scope="cluster",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="resource.k8s.io",resource="resourceslices",scope="cluster",subresource="",verb="WATCH",version="v1"} 300
apiserver_longrunning_requests{component="apiserver",group="resource.k8s.io",resource="resourceclaims",scope="namespace",subresource="",verb="WATCH",version="v1"} 1
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 10
apiserver_request_total{code="201",verb="POST"} 5
`
	for _, c := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"apiserver_longrunning_requests", map[string]string{"resource": "resourceclaims", "verb": "WATCH"}, 3},
		{"apiserver_longrunning_requests", map[string]string{"resource": "resourceslices"}, 300},
		{"apiserver_longrunning_requests", map[string]string{"resource": "pods"}, 0},
		{"apiserver_request_total", nil, 15},
		{"apiserver_request_total", map[string]string{"verb": "POST"}, 5},
		{"absent_total", nil, 0},
	} {
		got, err := metricSum(text, c.name, c.match)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s %v: %v, want %v", c.name, c.match, got, c.want)
		}
	}
	if _, err := metricSum("not { the format", "x", nil); err == nil {
		t.Error("a text that is not the exposition format: no error")
	}
}
