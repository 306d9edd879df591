package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/probe"
)

// observability is what both modes share to be watched: the log, as
// Kubernetes components log (k8s.io/component-base/logs), and the HTTP
// endpoints of the metrics and the probes.
type observability struct {
	metricsAddr string
	probeAddr   string
	logging     *logsapi.LoggingConfiguration
	features    featuregate.MutableVersionedFeatureGate
}

// addFlags defines --metrics-address, --probe-address and the logging
// flags (--v, --logging-format, ...).
func (o *observability) addFlags(fs *flag.FlagSet) {
	o.logging = logsapi.NewLoggingConfiguration()
	o.features = featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(o.features); err != nil {
		panic(err) // a fresh gate takes them
	}
	fs.StringVar(&o.metricsAddr, "metrics-address", "", "serve /metrics, /healthz and /readyz over HTTP on `ADDR` (host:port, or :port for every address); none when empty")
	fs.StringVar(&o.probeAddr, "probe-address", "", "serve only /healthz and /readyz over HTTP on `ADDR` (host:port, or :port), for probes without metrics; none when empty")
	// component-base's flags, less its alpha ones: they need the
	// LoggingAlphaOptions gate, which this command does not take.
	logging := flag.NewFlagSet("logging", flag.ContinueOnError)
	logsapi.AddGoFlags(o.logging, logging)
	logging.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Usage, "[Alpha]") {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// validate checks the logging flags and the addresses.
func (o *observability) validate() error {
	if o.metricsAddr != "" && o.metricsAddr == o.probeAddr {
		return fmt.Errorf("--metrics-address and --probe-address are both %q; the metrics address serves the probes as well", o.metricsAddr)
	}
	if errs := logsapi.Validate(o.logging, o.features, nil); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// logger applies the logging flags, with output to stderr, and returns
// the logger of the process: slog over klog, so that one format governs
// everything the process and its Kubernetes libraries log. It may be
// called once per process.
func (o *observability) logger(stderr io.Writer) (*slog.Logger, error) {
	err := logsapi.ValidateAndApplyWithOptions(o.logging, &logsapi.LoggingOptions{ErrorStream: stderr, InfoStream: stderr}, o.features)
	if err != nil {
		return nil, fmt.Errorf("logging: %w", err)
	}
	return slog.New(logr.ToSlogHandler(klog.Background())), nil
}

// serve serves the metrics and the probes of checks on --metrics-address,
// and the probes alone on --probe-address, until ctx ends or stop is
// called; stop waits until the servers are down. Without an address it
// serves nothing.
func (o *observability) serve(ctx context.Context, log *slog.Logger, m *metrics.Metrics, checks []probe.Check) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var servers []*probe.Server
	for _, s := range []struct {
		addr, what string
		metrics    http.Handler
	}{{o.metricsAddr, "metrics and probes", m.Handler()}, {o.probeAddr, "probes", nil}} {
		if s.addr == "" {
			continue
		}
		srv, err := probe.Listen(s.addr, probe.Handler(checks, probe.Options{Metrics: s.metrics, CacheFor: probe.CacheFor, Log: log}), log)
		if err != nil {
			cancel()
			return nil, err
		}
		servers = append(servers, srv)
		log.Info("serving "+s.what, "address", srv.Addr().String())
	}
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("HTTP server stopped", "address", srv.Addr().String(), "err", err)
			}
		})
	}
	return func() { cancel(); wg.Wait() }, nil
}

// runLog is the Caller's observer: it counts every plugin run in the
// metrics and logs it at verbosity 4 (--v=4).
type runLog struct {
	metrics *metrics.Metrics
	log     *slog.Logger
}

func (r runLog) ObservePluginRun(plugin, command string, code int, took time.Duration) {
	r.metrics.ObservePluginRun(plugin, command, code, took)
	r.log.Debug("plugin run", "plugin", plugin, "command", command, "code", code, "took", took.Round(time.Microsecond))
}

// printDefaults prints the flags of fs as Kubernetes components show
// them, with two dashes; one dash parses too.
func printDefaults(fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for line := range strings.Lines(b.String()) {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			line = "  --" + rest
		}
		fmt.Fprint(out, line)
	}
}
