package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every metric is exposed under its fixed name once used, with the
// labels given, and passes Prometheus' naming lint.
func TestNamesAndLabels(t *testing.T) {
	m := New()
	m.Prepared("tty.cdi-exec.io", nil, 20*time.Millisecond)
	m.Prepared("tty.cdi-exec.io", errors.New("x"), time.Second)
	m.Unprepared("tty.cdi-exec.io", nil, 5*time.Millisecond)
	m.ObservePluginRun("generic-tty", "ADD", 103, 30*time.Millisecond)
	m.Published("cdi-exec.io/tty", 6, 1)
	m.StaleClaimFreed("tty.cdi-exec.io")
	m.GCFreed("cdi-exec.io/tty")
	m.PollFailed("gpu.cdi-exec.io")

	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`cdi_exec_prepare_total{driver="tty.cdi-exec.io",result="success"} 1`,
		`cdi_exec_prepare_total{driver="tty.cdi-exec.io",result="error"} 1`,
		`cdi_exec_prepare_duration_seconds_bucket{driver="tty.cdi-exec.io",le="0.025"} 1`,
		`cdi_exec_prepare_duration_seconds_count{driver="tty.cdi-exec.io"} 2`,
		`cdi_exec_unprepare_total{driver="tty.cdi-exec.io",result="success"} 1`,
		`cdi_exec_unprepare_duration_seconds_count{driver="tty.cdi-exec.io"} 1`,
		`cdi_exec_plugin_run_duration_seconds_count{code="103",command="ADD",plugin="generic-tty"} 1`,
		`cdi_exec_published_devices{driver="cdi-exec.io/tty",health="healthy"} 6`,
		`cdi_exec_published_devices{driver="cdi-exec.io/tty",health="unhealthy"} 1`,
		`cdi_exec_stale_claims_freed_total{driver="tty.cdi-exec.io"} 1`,
		`cdi_exec_device_plugin_gc_frees_total{resource="cdi-exec.io/tty"} 1`,
		`cdi_exec_poll_errors_total{driver="gpu.cdi-exec.io"} 1`,
		"\ngo_goroutines ",
		"\nprocess_start_time_seconds ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in /metrics", want)
		}
	}
}
