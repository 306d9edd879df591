// Package probe serves cdi-kubelet-plugin's HTTP endpoints: /metrics,
// and the kubelet's probes /healthz (liveness: every driver or resource
// answers on its gRPC sockets) and /readyz (readiness: every one is
// registered with the kubelet, and the API server has a DRA driver's
// slices). A probe answers 200 "ok", or 503 with one line per driver or
// resource that fails it.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Timeout bounds one probe's checks, below the kubelet's default probe
// timeout of one second.
const Timeout = 900 * time.Millisecond

// Check is one driver or resource, as the probes see it.
type Check interface {
	// Name is the driver's or resource's name.
	Name() string
	// Live fails when the process does not answer on its sockets.
	Live(ctx context.Context) error
	// Ready fails, with the reason, until the kubelet may use it.
	Ready(ctx context.Context) error
}

// Handler serves metrics on /metrics and the probes of checks on /healthz
// and /readyz.
func Handler(metrics http.Handler, checks []Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), Timeout)
		defer cancel()
		answer(w, checks, func(c Check) error { return c.Live(ctx) })
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), Timeout)
		defer cancel()
		answer(w, checks, func(c Check) error { return c.Ready(ctx) })
	})
	return mux
}

// answer writes 200 "ok" when check passes for every one of checks, or
// 503 and a line per failure.
func answer(w http.ResponseWriter, checks []Check, check func(Check) error) {
	var failed []string
	for _, c := range checks {
		if err := check(c); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c.Name(), err))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(failed, "\n"))
		return
	}
	fmt.Fprintln(w, "ok")
}

// Server is the HTTP server of the endpoints.
type Server struct {
	l   net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen listens on addr (host:port; ":9470" for every address) for h.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	return &Server{l: l, log: log, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Serve serves until ctx ends, then shuts the server down, waiting at most
// five seconds for the requests in flight.
func (s *Server) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.l) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
