package dra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/probe"
	"github.com/cdi-exec/plugins/test/kubelettest"
)

// observed are options that record metrics and Events, as the command
// sets them.
func (n *node) observed() (Options, *metrics.Metrics) {
	opt := n.options()
	opt.Metrics = metrics.New()
	opt.Caller.Observer = opt.Metrics
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: n.client.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { b.Shutdown(); cancel() })
	opt.Events = b
	return opt, opt.Metrics
}

// waitEvents waits until the fake API server holds n Events, and returns
// them by the name of the claim they regard.
func (n *node) waitEvents(want int) map[string]eventsv1.Event {
	n.t.Helper()
	out := map[string]eventsv1.Event{}
	n.eventually(fmt.Sprint(want, " events"), func() error {
		l, err := n.client.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != want {
			return fmt.Errorf("%d events: %v", len(l.Items), l.Items)
		}
		for _, e := range l.Items {
			out[e.Regarding.Name] = e
		}
		return nil
	})
	return out
}

// TestMetricsAndEvents: prepares, unprepares, plugin runs, published
// devices and freed stale claims are counted by driver, result, plugin,
// command and code; failed prepares, a refused claim record and a freed
// stale claim get Events on their claims.
func TestMetricsAndEvents(t *testing.T) {
	n := ttyNode(t)
	opt, m := n.observed()
	reg := m.Registry()
	in := n.start(opt)
	d := in.driver(ttyDriver)
	if h, u := kubelettest.Metric(t, reg, "cdi_exec_published_devices", "driver", ttyDriver, "health", "healthy"),
		kubelettest.Metric(t, reg, "cdi_exec_published_devices", "driver", ttyDriver, "health", "unhealthy"); h != 7 || u != 0 {
		t.Errorf("published %v healthy, %v unhealthy; want 7 and 0", h, u)
	}
	if err := n.run("generic-tty", ttyConf, "CDI_COMMAND=ADD", "CDI_VERSION=0.0.2", "CDI_REQUEST=tty:1", "CDI_REQUEST_ID=cdictl-pod"); err != nil {
		t.Fatal(err)
	}
	good := n.claim("good", uid(1), ttyDriver, "tty16")
	held := n.claim("held", uid(2), ttyDriver, "tty13") // by cdictl-pod
	unnamed := n.claim("unnamed", uid(3), ttyDriver, "TTY1")
	for _, c := range []struct {
		name string
		ok   bool
		r    string
	}{{good.Name, true, n.prepare(ttyDriver, good).Error}, {held.Name, false, n.prepare(ttyDriver, held).Error}, {unnamed.Name, false, n.prepare(ttyDriver, unnamed).Error}} {
		if (c.r == "") != c.ok {
			t.Fatalf("prepare %s: error %q", c.name, c.r)
		}
	}
	if r := n.unprepare(ttyDriver, good); r.Error != "" {
		t.Fatal(r.Error)
	}
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cdi_exec_prepare_total", []string{"driver", ttyDriver, "result", "success"}, 1},
		{"cdi_exec_prepare_total", []string{"driver", ttyDriver, "result", "error"}, 2},
		{"cdi_exec_prepare_total", []string{"driver", gpuDriver, "result", "success"}, 0},
		{"cdi_exec_prepare_duration_seconds", []string{"driver", ttyDriver}, 3},
		{"cdi_exec_unprepare_total", []string{"driver", ttyDriver, "result", "success"}, 1},
		{"cdi_exec_unprepare_total", []string{"driver", ttyDriver, "result", "error"}, 0},
		{"cdi_exec_unprepare_duration_seconds", []string{"driver", ttyDriver}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "ADD", "code", "0"}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "ADD", "code", "103"}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "DEL", "code", "0"}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "generic-tty", "command", "DEVICES", "code", "0"}, 1},
		{"cdi_exec_plugin_run_duration_seconds", []string{"plugin", "drm", "command", "DEVICES", "code", "0"}, 1},
		{"cdi_exec_poll_errors_total", []string{"driver", ttyDriver}, 0},
	} {
		if got := kubelettest.Metric(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%q = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}

	// A published device turns unusable: it stays, tainted.
	if err := os.Rename(filepath.Join(n.root, "dev/tty17"), filepath.Join(n.root, "dev/.tty17-away")); err != nil {
		t.Fatal(err)
	}
	d.refresh(t.Context())
	if h, u := kubelettest.Metric(t, reg, "cdi_exec_published_devices", "driver", ttyDriver, "health", "healthy"),
		kubelettest.Metric(t, reg, "cdi_exec_published_devices", "driver", ttyDriver, "health", "unhealthy"); h != 5 || u != 1 {
		t.Errorf("published %v healthy, %v unhealthy; want 5 (tty13 is held) and 1", h, u)
	}

	// A stale claim is freed.
	stale := n.claim("stale", uid(4), ttyDriver, "tty18")
	if r := n.prepare(ttyDriver, stale); r.Error != "" {
		t.Fatal(r.Error)
	}
	n.deleteClaim(stale)
	now := time.Now()
	d.lifecycle.collect(t.Context(), now)
	d.lifecycle.collect(t.Context(), now.Add(opt.StaleGrace))
	if got := kubelettest.Metric(t, reg, "cdi_exec_stale_claims_freed_total", "driver", ttyDriver); got != 1 {
		t.Errorf("stale claims freed: %v, want 1", got)
	}

	// A claim record file of someone else's is never replaced.
	if err := os.WriteFile(filepath.Join(n.claimDir, ttyDriver+".json"), []byte(`{"version": 99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := n.claim("refused", uid(5), ttyDriver, "tty19")
	if r := n.prepare(ttyDriver, refused); !strings.Contains(r.Error, "never replaced") {
		t.Fatalf("prepare with a foreign record file: %q", r.Error)
	}
	if r := n.unprepare(ttyDriver, good); !strings.Contains(r.Error, "never replaced") {
		t.Fatalf("unprepare with a foreign record file: %q", r.Error)
	}

	evs := n.waitEvents(5)
	for _, tt := range []struct {
		claim, uid, typ, reason, action, note string
	}{
		{"held", uid(2), "Warning", ReasonPrepareFailed, "Prepare", "plugin generic-tty failed with code 103: "},
		{"unnamed", uid(3), "Warning", ReasonPrepareFailed, "Prepare", "TTY1"},
		{"stale", uid(4), "Normal", ReasonStaleClaimFreed, "Free", "the ResourceClaim no longer exists, for 1m0s: devices [tty18] freed"},
		{"refused", uid(5), "Warning", ReasonClaimRecordRefused, "Prepare", "never replaced"},
		{"good", uid(1), "Warning", ReasonClaimRecordRefused, "Unprepare", "never replaced"},
	} {
		e, ok := evs[tt.claim]
		switch {
		case !ok:
			t.Errorf("no event on %s: %v", tt.claim, evs)
		case e.Regarding.Kind != "ResourceClaim" || e.Regarding.APIVersion != "resource.k8s.io/v1" || e.Regarding.Namespace != "default" || string(e.Regarding.UID) != tt.uid:
			t.Errorf("event on %s regards %+v", tt.claim, e.Regarding)
		case e.Type != tt.typ || e.Reason != tt.reason || e.Action != tt.action || !strings.Contains(e.Note, tt.note):
			t.Errorf("event on %s: %s %s %s %q; want %s %s %s and %q in the note", tt.claim, e.Type, e.Reason, e.Action, e.Note, tt.typ, tt.reason, tt.action, tt.note)
		case e.ReportingController != ttyDriver || !strings.HasPrefix(e.ReportingInstance, ttyDriver+"-"):
			t.Errorf("event on %s reported by %s, %s", tt.claim, e.ReportingController, e.ReportingInstance)
		}
	}
}

// TestPollErrors: a config whose plugin cannot be run counts a poll
// error for its driver at every poll.
func TestPollErrors(t *testing.T) {
	n := newNode(t, host(), map[string]string{
		"tty.d/tty.conf":       ttyConf,
		"serial.d/serial.conf": `{"cdiVersion": "0.0.2", "name": "gone", "type": "serial", "plugin": "no-such-plugin"}`,
	})
	opt, m := n.observed()
	in := n.start(opt)
	in.driver("serial.cdi-exec.io").refresh(t.Context())
	for _, tt := range []struct {
		driver string
		want   float64
	}{{"serial.cdi-exec.io", 2}, {ttyDriver, 0}} {
		if got := kubelettest.Metric(t, m.Registry(), "cdi_exec_poll_errors_total", "driver", tt.driver); got != tt.want {
			t.Errorf("poll errors of %s: %v, want %v", tt.driver, got, tt.want)
		}
	}
}

// TestProbes: /readyz fails until the kubelet has registered every
// driver, and the checks say why (the log gets the reasons; the answer
// names only the drivers); /healthz holds while the drivers serve their
// sockets and fails once they are gone.
func TestProbes(t *testing.T) {
	n := ttyNode(t)
	in := n.start(n.options())
	// Readiness waits for the slices too, which the slice controllers
	// write in the background: the steps below are about registration.
	for _, d := range []string{gpuDriver, ttyDriver} {
		n.eventually(d+"'s slice written", func() error {
			if len(n.slices(d)) == 0 {
				return errors.New("none yet")
			}
			return nil
		})
	}
	checks := in.plugin.Checks()
	srv := httptest.NewServer(probe.Handler(checks, probe.Options{Metrics: http.NotFoundHandler()}))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// reasons are the checks' own answers, "driver: reason".
	reasons := func(live bool) []string {
		var out []string
		for _, c := range checks {
			check := c.Ready
			if live {
				check = c.Live
			}
			if err := check(t.Context()); err != nil {
				out = append(out, c.Name()+": "+err.Error())
			}
		}
		return out
	}
	notify := func(driver string, st *registerapi.RegistrationStatus) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		// The helper answers a failed registration with that error.
		_, err := registerapi.NewRegistrationClient(n.conn(in.regSocket(driver))).NotifyRegistrationStatus(ctx, st)
		if (err == nil) != st.PluginRegistered {
			t.Fatalf("NotifyRegistrationStatus(%+v): %v", st, err)
		}
	}
	steps := []struct {
		do     func()
		path   string
		code   int
		body   []string // the lines of the answer
		reason []string // the checks' reasons, by prefix
	}{
		{func() {}, "/healthz", 200, []string{"ok"}, nil},
		{func() {}, "/readyz", 503, []string{gpuDriver + ": not ready", ttyDriver + ": not ready"},
			[]string{gpuDriver + ": not registered with the kubelet yet", ttyDriver + ": not registered with the kubelet yet"}},
		{func() { notify(ttyDriver, &registerapi.RegistrationStatus{PluginRegistered: true}) }, "/readyz", 503, []string{gpuDriver + ": not ready"},
			[]string{gpuDriver + ": not registered with the kubelet yet"}},
		{func() { notify(gpuDriver, &registerapi.RegistrationStatus{Error: "version 9 unsupported"}) }, "/readyz", 503, []string{gpuDriver + ": not ready"},
			[]string{gpuDriver + ": the kubelet refused the registration: version 9 unsupported"}},
		{func() { notify(gpuDriver, &registerapi.RegistrationStatus{PluginRegistered: true}) }, "/readyz", 200, []string{"ok"}, nil},
		{func() {
			if err := in.shutdown(); err != nil {
				t.Fatal(err)
			}
		}, "/healthz", 503, []string{gpuDriver + ": not live", ttyDriver + ": not live"},
			[]string{gpuDriver + ": registration socket ", ttyDriver + ": registration socket "}},
	}
	for i, s := range steps {
		s.do()
		code, body := get(s.path)
		lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		if code != s.code || !slices.Equal(lines, s.body) {
			t.Fatalf("step %d: %s answers %d %q, want %d %q", i, s.path, code, body, s.code, s.body)
		}
		if strings.Contains(body, n.kubelet) {
			t.Fatalf("step %d: %s answers with a path: %q", i, s.path, body)
		}
		if got := reasons(s.path == "/healthz"); len(got) != len(s.reason) || !slices.EqualFunc(got, s.reason, strings.HasPrefix) {
			t.Fatalf("step %d: the checks' reasons %q, want %q", i, got, s.reason)
		}
	}
}

// TestReadyWaitsForTheSlice checks that /readyz answers what the API
// server has, not what was handed to the slice controller: while the API
// server refuses the driver's slices (as the admission policy would),
// the driver is not ready, with the reason; once it takes them, it is.
func TestReadyWaitsForTheSlice(t *testing.T) {
	n := ttyNode(t)
	var refuse atomic.Bool
	refuse.Store(true)
	n.client.PrependReactor("create", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewForbidden(resourceapi.Resource("resourceslices"), "", errors.New("denied by the test's policy"))
		}
		return false, nil, nil
	})
	in := n.start(n.options())
	for _, driver := range []string{gpuDriver, ttyDriver} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if _, err := registerapi.NewRegistrationClient(n.conn(in.regSocket(driver))).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	checks := in.plugin.Checks()
	ready := func() error {
		var failed []string
		for _, c := range checks {
			if err := c.Ready(t.Context()); err != nil {
				failed = append(failed, c.Name()+": "+err.Error())
			}
		}
		if len(failed) > 0 {
			return errors.New(strings.Join(failed, "; "))
		}
		return nil
	}
	n.eventually("the refused write to reach the probe", func() error {
		err := ready()
		if err == nil {
			return fmt.Errorf("%w: ready while the API server refuses the slices", errGiveUp)
		}
		if !strings.Contains(err.Error(), "writing the ResourceSlice failed") || !strings.Contains(err.Error(), "denied by the test's policy") {
			return err
		}
		return nil
	})
	refuse.Store(false)
	n.eventually("ready once the API server takes the slices", ready)
}

// TestEventNoteCut checks that a long note is cut to the API server's
// bound at a character's boundary, so that it stays valid UTF-8.
func TestEventNoteCut(t *testing.T) {
	for _, note := range []string{
		strings.Repeat("é", noteMax),       // two bytes each
		"x" + strings.Repeat("€", noteMax), // three bytes each, off by one
		strings.Repeat("a", noteMax),       // fits exactly
		"bad \xff byte",                    // not UTF-8 at all
	} {
		rec := events.NewFakeRecorder(1)
		lc := &lifecycle{recorder: rec}
		lc.event(claimRef("ns", "c", "uid"), "Warning", ReasonPrepareFailed, "Prepare", note)
		got := strings.TrimPrefix(<-rec.Events, "Warning "+ReasonPrepareFailed+" ")
		if len(got) > noteMax || !utf8.ValidString(got) {
			t.Errorf("a note of %d bytes became %d bytes, valid UTF-8 %v", len(note), len(got), utf8.ValidString(got))
		}
		if len(note) <= noteMax && utf8.ValidString(note) && got != note {
			t.Errorf("a note that fits was changed: %q", got)
		}
	}
}

// TestEventNoteEscapes: the Event helper escapes what a terminal would act
// on (escape sequences, carriage returns and newlines, NUL, bidirectional
// overrides), whoever built the note, and leaves printable text alone.
func TestEventNoteEscapes(t *testing.T) {
	for note, want := range map[string]string{
		"red \x1b[31mtext\x1b[0m":    `red \x1b[31mtext\x1b[0m`,
		"line\r\nforged line":        `line\r\nforged line`,
		"nul\x00byte":                `nul\x00byte`,
		"tab\there":                  `tab\there`,
		"abc\u202edcba":              `abc\u202edcba`,
		"zero\u200bwidth":            `zero\u200bwidth`,
		"del\x7f":                    `del\x7f`,
		"c1 \u009b":                  `c1 \u009b`,
		"plain é € 漢字 \\ \"quoted\"": "plain é € 漢字 \\ \"quoted\"",
		"bad \xff":                   "bad \uFFFD",
	} {
		rec := events.NewFakeRecorder(1)
		lc := &lifecycle{recorder: rec}
		lc.event(claimRef("ns", "c", "uid"), "Warning", ReasonPrepareFailed, "Prepare", note)
		if got := strings.TrimPrefix(<-rec.Events, "Warning "+ReasonPrepareFailed+" "); got != want {
			t.Errorf("note %q became %q, want %q", note, got, want)
		}
	}
	// The escapes count against the bound.
	rec := events.NewFakeRecorder(1)
	lc := &lifecycle{recorder: rec}
	lc.event(claimRef("ns", "c", "uid"), "Warning", ReasonPrepareFailed, "Prepare", strings.Repeat("\x1b", noteMax))
	if got := strings.TrimPrefix(<-rec.Events, "Warning "+ReasonPrepareFailed+" "); len(got) > noteMax || strings.ContainsRune(got, 0x1b) {
		t.Errorf("a note of escapes became %d bytes: %.40q", len(got), got)
	}
}
