package probe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// check is a Check whose answers the test sets.
type check struct {
	name        string
	live, ready error
}

func (c check) Name() string                { return c.name }
func (c check) Live(context.Context) error  { return c.live }
func (c check) Ready(context.Context) error { return c.ready }
func (c check) String() string              { return c.name }

func TestHandler(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics\n") })
	ok := check{name: "tty.cdi-exec.io"}
	unready := check{name: "gpu.cdi-exec.io", ready: errors.New("not registered with the kubelet yet")}
	dead := check{name: "cdi-exec.io/tty", live: errors.New("device-plugin socket: connection refused")}
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
		{[]Check{ok, unready}, "/readyz", 503, "gpu.cdi-exec.io: not registered with the kubelet yet\n"},
		{[]Check{ok, unready}, "/healthz", 200, "ok\n"},
		{[]Check{dead, unready}, "/healthz", 503, "cdi-exec.io/tty: device-plugin socket: connection refused\n"},
		{[]Check{dead, unready}, "/readyz", 503, "gpu.cdi-exec.io: not registered with the kubelet yet\n"},
		{[]Check{ok}, "/", 404, "404 page not found\n"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		Handler(metrics, tt.checks).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.code || rec.Body.String() != tt.body {
			t.Errorf("%v %s: %d %q, want %d %q", tt.checks, tt.path, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
	}
}

// The server answers on the address it was given, and stops when its
// context ends.
func TestServe(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Handler(http.NotFoundHandler(), []Check{check{name: "a"}}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
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
	if _, err := Listen("256.0.0.1:1", http.NotFoundHandler(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "metrics address") {
		t.Fatalf("Listen on a bad address: %v", err)
	}
}
