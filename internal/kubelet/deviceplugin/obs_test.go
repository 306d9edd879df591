package deviceplugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// TestMetrics: plugin runs of Allocate, the devices published and the
// allocations the garbage collector frees are counted by resource,
// plugin, command and code.
func TestMetrics(t *testing.T) {
	n := ttyNode(t)
	opt := n.options()
	opt.Metrics = metrics.New()
	opt.Caller.Observer = opt.Metrics
	reg := opt.Metrics.Registry()
	n.start(opt)
	c := n.kubelet.Dial(n.register().Endpoint)
	for _, ids := range [][]string{{"tty13", "tty14"}, {"tty15"}} {
		if _, err := allocate(c, ids...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := allocate(c, "tty5"); err == nil { // reserved
		t.Fatal("tty5 allocated")
	}
	r := n.mode.res[0]
	r.refresh(t.Context())
	t0 := time.Now()
	for _, at := range []time.Duration{0, opt.Grace} { // nothing is live
		if err := n.mode.collect(t.Context(), t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "ADD", "code", "0"}, 2},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "ADD", "code", "103"}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "DEL", "code", "0"}, 2},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "DEL", "code", "5"}, 1}, // the failed one held nothing
		{"cdi_exec_device_plugin_gc_frees_total", []string{"resource", ttyRes}, 2},
		{"cdi_exec_published_devices", []string{"driver", ttyRes, "health", "healthy"}, 7},
		{"cdi_exec_published_devices", []string{"driver", ttyRes, "health", "unhealthy"}, 0},
		{"cdi_exec_poll_errors_total", []string{"driver", ttyRes}, 0},
		{"cdi_exec_prepare_total", []string{"driver", ttyRes, "result", "success"}, 0},
	} {
		if got := kubelettest.Metric(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%q = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// TestProbes: the resource is ready once registered with the kubelet,
// not while the kubelet is away, and again once it is back; it is live
// while its socket answers.
func TestProbes(t *testing.T) {
	n := ttyNode(t)
	n.start(n.options())
	checks := n.mode.Checks()
	if len(checks) != 1 || checks[0].Name() != ttyRes {
		t.Fatalf("checks %v", checks)
	}
	p := checks[0]
	// wait waits until Ready says ok, or its error has want in it.
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			err := p.Ready(t.Context())
			if want == "" && err == nil || err != nil && want != "" && strings.Contains(err.Error(), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Ready() = %v, want %q", err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	live := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return p.Live(ctx)
	}
	n.register()
	wait("")
	if err := live(); err != nil {
		t.Fatal(err)
	}
	n.kubelet.Stop()
	wait("not registered with the kubelet")
	n.kubelet.Restart()
	n.register()
	wait("")
	if err := n.shutdown(); err != nil {
		t.Fatal(err)
	}
	wait("not registered with the kubelet")
	if err := live(); err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "device-plugin socket") {
		t.Fatalf("Live after shutdown: %v", err)
	}
}
