package probe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// check is a Check whose answers the test sets, counting its runs.
type check struct {
	name        string
	live, ready error
	runs        *atomic.Int32
}

func (c check) Name() string { return c.name }
func (c check) Live(context.Context) error {
	if c.runs != nil {
		c.runs.Add(1)
	}
	return c.live
}
func (c check) Ready(context.Context) error {
	if c.runs != nil {
		c.runs.Add(1)
	}
	return c.ready
}
func (c check) String() string { return c.name }

func get(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestHandler: the probes answer ok, or 503 naming what fails and not
// why; the reasons, which name sockets, go to the log.
func TestHandler(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics\n") })
	ok := check{name: "tty.cdi-exec.io"}
	unready := check{name: "gpu.cdi-exec.io", ready: errors.New("not registered with the kubelet yet")}
	dead := check{name: "cdi-exec.io/tty", live: errors.New("device-plugin socket /var/lib/kubelet/device-plugins/cdi-exec.io-tty.sock: connection refused")}
	tests := []struct {
		checks []Check
		path   string
		code   int
		body   string
	}{
		{[]Check{ok}, "/metrics", 200, "metrics\n"},
		{[]Check{ok, dead}, "/metrics", 200, "metrics\n"},
		{[]Check{ok}, "/healthz", 200, "ok\n"},
		{[]Check{ok}, "/readyz", 200, "ok\n"},
		{nil, "/readyz", 200, "ok\n"},
		{[]Check{ok, unready}, "/readyz", 503, "gpu.cdi-exec.io: not ready\n"},
		{[]Check{ok, unready}, "/healthz", 200, "ok\n"},
		{[]Check{dead, unready}, "/healthz", 503, "cdi-exec.io/tty: not live\n"},
		{[]Check{dead, unready}, "/readyz", 503, "gpu.cdi-exec.io: not ready\n"},
		{[]Check{ok}, "/", 404, "404 page not found\n"},
	}
	for _, tt := range tests {
		var logs bytes.Buffer
		h := Handler(tt.checks, Options{Metrics: metrics, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		code, body := get(h, tt.path)
		if code != tt.code || body != tt.body {
			t.Errorf("%v %s: %d %q, want %d %q", tt.checks, tt.path, code, body, tt.code, tt.body)
		}
		if code == 503 && !strings.Contains(logs.String(), "probe fails") {
			t.Errorf("%v %s: the reasons were not logged: %q", tt.checks, tt.path, logs.String())
		}
	}
	// The socket's path is logged, once while the reasons stay the same.
	var logs bytes.Buffer
	h := Handler([]Check{dead}, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		if _, body := get(h, "/healthz"); strings.Contains(body, "/var/lib") {
			t.Fatalf("the answer leaks a path: %q", body)
		}
	}
	if n := strings.Count(logs.String(), "device-plugins/cdi-exec.io-tty.sock"); n != 1 {
		t.Errorf("the reason was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestProbesOnly: without metrics the handler serves the probes alone.
func TestProbesOnly(t *testing.T) {
	h := Handler([]Check{check{name: "a"}}, Options{})
	if code, _ := get(h, "/metrics"); code != 404 {
		t.Errorf("/metrics without metrics: %d", code)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(h, path); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
}

// TestCache: a probe's answer is kept for CacheFor: requests within it,
// also at the same time, run the checks once; after it, again.
func TestCache(t *testing.T) {
	var runs atomic.Int32
	h := Handler([]Check{check{name: "a", runs: &runs}}, Options{CacheFor: 200 * time.Millisecond})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if code, _ := get(h, "/readyz"); code != 200 {
				t.Errorf("/readyz: %d", code)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("20 requests ran the checks %d times, want once", n)
	}
	get(h, "/healthz") // each probe has its own answer
	if n := runs.Load(); n != 2 {
		t.Fatalf("/healthz after /readyz: %d runs, want 2", n)
	}
	time.Sleep(250 * time.Millisecond)
	get(h, "/readyz")
	if n := runs.Load(); n != 3 {
		t.Fatalf("after the cache's time: %d runs, want 3", n)
	}
	// Without a cache, every request runs the checks.
	runs.Store(0)
	h = Handler([]Check{check{name: "a", runs: &runs}}, Options{})
	get(h, "/readyz")
	get(h, "/readyz")
	if n := runs.Load(); n != 2 {
		t.Fatalf("without a cache: %d runs, want 2", n)
	}
}

// The server answers on the address it was given, with timeouts for slow
// and idle clients, and stops when its context ends.
func TestServe(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Handler([]Check{check{name: "a"}}, Options{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if s.srv.ReadHeaderTimeout <= 0 || s.srv.ReadTimeout <= 0 || s.srv.WriteTimeout <= 0 || s.srv.IdleTimeout <= 0 {
		t.Fatalf("timeouts: header %v, read %v, write %v, idle %v", s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.WriteTimeout, s.srv.IdleTimeout)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	resp, err := http.Get("http://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := http.Get("http://" + s.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still serving")
	}
	if _, err := Listen("256.0.0.1:1", http.NotFoundHandler(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "HTTP address") {
		t.Fatalf("Listen on a bad address: %v", err)
	}
}
