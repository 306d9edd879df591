// Package metrics holds the Prometheus metrics of cdi-kubelet-plugin, in
// a registry of their own: claims prepared and unprepared, every plugin
// run, the devices published, claims and
// allocations freed, and failed polls. All names start with cdi_exec_; docs/operations.md lists them.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Results of a prepare or unprepare.
const (
	ResultSuccess = "success"
	ResultError   = "error"
)

// Health of a published device.
const (
	Healthy   = "healthy"
	Unhealthy = "unhealthy"
)

// Metrics are the process's metrics. Its methods are safe for concurrent
// use. It implements caller.Observer.
type Metrics struct {
	reg               *prometheus.Registry
	prepare           *prometheus.CounterVec
	prepareDuration   *prometheus.HistogramVec
	unprepare         *prometheus.CounterVec
	unprepareDuration *prometheus.HistogramVec
	pluginRun         *prometheus.HistogramVec
	published         *prometheus.GaugeVec
	staleFreed        *prometheus.CounterVec
	gcFrees           *prometheus.CounterVec
	pollErrors        *prometheus.CounterVec
}

// New returns the metrics in a new registry, with the Go runtime's and
// the process's collectors.
func New() *Metrics {
	// The buckets suit runs of a few milliseconds (a DEVICES of a warm
	// plugin) to tens of seconds (a plugin near its timeout).
	buckets := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		prepare: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdi_exec_prepare_total",
			Help: "ResourceClaims prepared by a DRA driver, by result (success or error).",
		}, []string{"driver", "result"}),
		prepareDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cdi_exec_prepare_duration_seconds",
			Help:    "Time to prepare one ResourceClaim, including its plugin runs.",
			Buckets: buckets,
		}, []string{"driver"}),
		unprepare: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdi_exec_unprepare_total",
			Help: "ResourceClaims unprepared by a DRA driver, by result (success or error).",
		}, []string{"driver", "result"}),
		unprepareDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cdi_exec_unprepare_duration_seconds",
			Help:    "Time to unprepare one ResourceClaim, including its plugin runs.",
			Buckets: buckets,
		}, []string{"driver"}),
		pluginRun: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cdi_exec_plugin_run_duration_seconds",
			Help:    "Time of one exec-plugin run, by plugin, command and protocol code (0 on success).",
			Buckets: buckets,
		}, []string{"plugin", "command", "code"}),
		published: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cdi_exec_published_devices",
			Help: "Devices published to Kubernetes, by DRA driver or device-plugin resource and health (healthy, or unhealthy: tainted, or Unhealthy to the kubelet).",
		}, []string{"driver", "health"}),
		staleFreed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdi_exec_stale_claims_freed_total",
			Help: "Prepared claims a DRA driver freed because their ResourceClaim was gone.",
		}, []string{"driver"}),
		gcFrees: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdi_exec_device_plugin_gc_frees_total",
			Help: "Allocations that held devices and that the device-plugin mode freed because the kubelet no longer listed them.",
		}, []string{"resource"}),
		pollErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cdi_exec_poll_errors_total",
			Help: "Failed polls of a plugin's devices (DEVICES, or the runs it needs), by DRA driver or device-plugin resource.",
		}, []string{"driver"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.prepare, m.prepareDuration, m.unprepare, m.unprepareDuration, m.pluginRun,
		m.published, m.staleFreed, m.gcFrees, m.pollErrors,
	)
	return m
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// result is the result label of err.
func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultSuccess
}

// Prepared records one claim's preparation by driver, which took took and
// ended in err.
func (m *Metrics) Prepared(driver string, err error, took time.Duration) {
	m.prepare.WithLabelValues(driver, result(err)).Inc()
	m.prepareDuration.WithLabelValues(driver).Observe(took.Seconds())
}

// Unprepared records one claim's unpreparation by driver.
func (m *Metrics) Unprepared(driver string, err error, took time.Duration) {
	m.unprepare.WithLabelValues(driver, result(err)).Inc()
	m.unprepareDuration.WithLabelValues(driver).Observe(took.Seconds())
}

// ObservePluginRun implements caller.Observer.
func (m *Metrics) ObservePluginRun(plugin, command string, code int, took time.Duration) {
	m.pluginRun.WithLabelValues(plugin, command, strconv.Itoa(code)).Observe(took.Seconds())
}

// Published sets how many devices a driver (or device-plugin resource)
// publishes, healthy and not.
func (m *Metrics) Published(driver string, healthy, unhealthy int) {
	m.published.WithLabelValues(driver, Healthy).Set(float64(healthy))
	m.published.WithLabelValues(driver, Unhealthy).Set(float64(unhealthy))
}

// StaleClaimFreed counts a stale claim a driver freed.
func (m *Metrics) StaleClaimFreed(driver string) { m.staleFreed.WithLabelValues(driver).Inc() }

// GCFreed counts an allocation the device-plugin mode's garbage collector
// freed for resource (one that still held devices).
func (m *Metrics) GCFreed(resource string) { m.gcFrees.WithLabelValues(resource).Inc() }

// PollFailed counts a failed poll of a driver's (or resource's) devices.
func (m *Metrics) PollFailed(driver string) { m.pollErrors.WithLabelValues(driver).Inc() }
