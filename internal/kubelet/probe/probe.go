// Package probe serves cdi-kubelet-plugin's HTTP endpoints: /metrics,
// and the kubelet's probes /healthz (liveness: every driver or resource
// answers on its gRPC sockets) and /readyz (readiness: every one is
// registered with the kubelet, and the API server has a DRA driver's
// slices). A probe answers 200 "ok", or 503 with one line per driver or
// resource that fails it, "<name>: not live" or "<name>: not ready": the
// reasons (which name sockets and paths) go to the log, not to whoever
// asks. An answer is kept for CacheFor, so that probes sent often cost no
// more than one check a second (/healthz dials each gRPC socket, /readyz
// may ask the API server).
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
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

// CacheFor is how long an answer of a probe is kept.
const CacheFor = time.Second

// Options are the Handler's settings.
type Options struct {
	// Metrics serves /metrics; nil serves no /metrics (the probes only).
	Metrics http.Handler
	// CacheFor is how long a probe's answer is kept; 0 keeps none.
	CacheFor time.Duration
	// Log gets the reasons of failed checks, once per change of them.
	Log *slog.Logger
}

// Handler serves the metrics on /metrics, when there are, and the probes
// of checks on /healthz and /readyz.
func Handler(checks []Check, opt Options) http.Handler {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	if opt.Metrics != nil {
		mux.Handle("GET /metrics", opt.Metrics)
	}
	live := &probe{checks: checks, what: "live", ttl: opt.CacheFor, log: log, check: Check.Live}
	ready := &probe{checks: checks, what: "ready", ttl: opt.CacheFor, log: log, check: Check.Ready}
	mux.Handle("GET /healthz", live)
	mux.Handle("GET /readyz", ready)
	return mux
}

// probe is one of the probes, with its last answer.
type probe struct {
	checks []Check
	what   string // "live", "ready"
	ttl    time.Duration
	log    *slog.Logger
	check  func(Check, context.Context) error

	mu     sync.Mutex
	at     time.Time // of the last answer
	failed []string  // its lines, empty for "ok"
	logged string    // the reasons last logged
}

func (p *probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	failed := p.answer(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(failed, "\n"))
		return
	}
	fmt.Fprintln(w, "ok")
}

// answer runs the checks, or returns the last answer while it is fresh.
// Requests at the same time wait for one run of the checks.
func (p *probe) answer(ctx context.Context) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ttl > 0 && !p.at.IsZero() && time.Since(p.at) < p.ttl {
		return p.failed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	var failed, reasons []string
	for _, c := range p.checks {
		if err := p.check(c, ctx); err != nil {
			failed = append(failed, c.Name()+": not "+p.what)
			reasons = append(reasons, fmt.Sprintf("%s: %v", c.Name(), err))
		}
	}
	if why := strings.Join(reasons, "; "); why != p.logged {
		if why == "" {
			p.log.Info("probe passes again", "probe", p.what)
		} else {
			p.log.Warn("probe fails", "probe", p.what, "reasons", why)
		}
		p.logged = why
	}
	p.at, p.failed = time.Now(), failed
	return failed
}

// Server is the HTTP server of the endpoints.
type Server struct {
	l   net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen listens on addr (host:port; ":9470" for every address) for h,
// with timeouts for slow clients and idle connections.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP address: %w", err)
	}
	return &Server{l: l, log: log, srv: &http.Server{
		Handler: h,
		// Bounds for a client that is slow or holds connections open:
		// the kubelet's probes and Prometheus's scrapes finish in well
		// under a second.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
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
