//go:build e2enode

package k8se2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The targets of make bench-k8s (issue 24): a claim adds at most 10% to
// the median pod start, and a batch of claim pods is all Running within
// 1.25× the time of a batch without claims.
const (
	targetSequential = 1.10
	targetBatch      = 1.25
)

// benchTemplate is the ResourceClaimTemplate of the bench's claim pods:
// one tty.
const benchTemplate = "one-tty"

// TestBenchPodStart is make bench-k8s: on the real node with the DRA
// mode deployed as TestClusterDRATTYs deploys it, it measures the pod
// start, from the create call to the first watch event that shows the
// pod's container running (the test's monotonic clock; the API's
// timestamps have whole seconds only), of busybox pods without a claim
// and with a claim for one tty from a ResourceClaimTemplate:
//   - BENCH_K8S_RUNS (10) pods of each kind one at a time, alternating
//     the kinds;
//   - BENCH_K8S_BATCHES (3) times BENCH_K8S_BATCH (16) pods of each kind
//     created at once (concurrent create calls): the time until all run,
//     and each pod's start.
//
// Each pod is deleted, and its claim freed, before the next measurement.
// One pod of each kind runs first, unmeasured. The driver's own prepare
// and unprepare times come from its log ("took"), the kubelet's gRPC
// view from its dra_grpc_operations_duration_seconds histogram, and the
// driver's histograms from its /metrics when it has --metrics-address.
// The table compares the kinds with the targets; a miss fails the test
// only under BENCH_K8S_STRICT=1, since on a loaded machine it is noise.
func TestBenchPodStart(t *testing.T) {
	runs := benchKnob(t, "BENCH_K8S_RUNS", 10)
	batches := benchKnob(t, "BENCH_K8S_BATCHES", 3)
	size := benchKnob(t, "BENCH_K8S_BATCH", 16)
	ctx, d := newDRARun(t, 40*time.Minute)
	d.loadImage(ctx, t)
	objs := d.driverManifests(t)
	metricsURL := withMetricsAddress(ctx, t, d.b.bin, objs)
	d.apply(ctx, t, objs)
	driverPod := d.waitDriver(ctx, t, "")
	if free := d.waitSlice(ctx, t); len(free) < size {
		t.Fatalf("%d free ttys, fewer than a batch of %d: set BENCH_K8S_BATCH lower", len(free), size)
	}
	d.apply(ctx, t, []runtime.Object{oneTTYTemplate()})
	b := &bench{draRun: d, driverPod: driverPod, metricsURL: metricsURL}
	load := loadAverage(t)

	b.batch(ctx, t, false, 1)
	b.batch(ctx, t, true, 1)
	seq := map[bool]*phase{false: {}, true: {}}
	for range runs {
		for _, claim := range []bool{false, true} {
			seq[claim].add(b.measure(ctx, t, claim, 1))
		}
	}
	par := map[bool]*phase{false: {}, true: {}}
	for range batches {
		for _, claim := range []bool{false, true} {
			par[claim].add(b.measure(ctx, t, claim, size))
		}
	}
	r := report{runs: runs, batches: batches, size: size, seq: seq, par: par,
		load: load + " at the start, " + loadAverage(t) + " at the end", metrics: metricsURL != ""}
	t.Log("\n" + r.String())
	if misses := r.misses(); len(misses) > 0 {
		if os.Getenv("BENCH_K8S_STRICT") == "1" {
			t.Errorf("targets missed: %s", strings.Join(misses, "; "))
		} else {
			t.Logf("targets missed (BENCH_K8S_STRICT=1 fails on this): %s", strings.Join(misses, "; "))
		}
	}
}

// benchKnob reads a positive count from the environment.
func benchKnob(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

func loadAverage(t *testing.T) string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return "load average " + strings.Join(strings.Fields(string(data))[:3], " ")
}

// withMetricsAddress returns the driver's /metrics URL, or "" when the
// driver has no --metrics-address. The driver's pod is on the host's
// network: a --metrics-address the DaemonSet has already is read at
// 127.0.0.1 when it names no host (its probes may use the port); without
// one, one on a free port of 127.0.0.1 is added.
func withMetricsAddress(ctx context.Context, t *testing.T, bin string, objs []runtime.Object) string {
	t.Helper()
	help, err := run(ctx, nil, filepath.Join(bin, "cdi-kubelet-plugin"), "dra", "-h")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help, "metrics-address") {
		t.Log("no metrics: the driver has no --metrics-address")
		return ""
	}
	for _, o := range objs {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		ctr := &ds.Spec.Template.Spec.Containers[0]
		for _, a := range ctr.Args {
			if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "metrics-address="); ok && v != "" {
				host, port, err := net.SplitHostPort(v)
				if err != nil {
					t.Fatalf("the DaemonSet's %s: %v", a, err)
				}
				if host == "" || host == "0.0.0.0" || host == "::" {
					host = "127.0.0.1"
				}
				return "http://" + net.JoinHostPort(host, port) + "/metrics"
			}
		}
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		ctr.Args = append(ctr.Args, "--metrics-address="+addr)
		return "http://" + addr + "/metrics"
	}
	t.Fatal("deploy/ has no DaemonSet")
	return ""
}

func oneTTYTemplate() *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: benchTemplate, Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "tty",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: draDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				},
			}}},
		}},
	}
}

// bench runs the measurements on one deployment.
type bench struct {
	*draRun
	driverPod  string
	metricsURL string // the driver's /metrics, "" without --metrics-address
	seq        int    // batches so far, for unique names
}

// sample is one measurement: a batch of pods of one kind.
type sample struct {
	starts             []time.Duration // each pod's, create call to running
	all                time.Duration   // first create call to the last pod running
	prepare, unprepare []time.Duration // the driver's log's took
	// The kubelet's gRPC calls and the driver's histograms, observed
	// during the measurement.
	kubeletPrepare, kubeletUnprepare, driverPrepare, driverUnprepare histogram
}

// measure runs one batch and reads what the driver and the kubelet
// observed meanwhile, its pods' deletion included.
func (b *bench) measure(ctx context.Context, t *testing.T, claim bool, n int) sample {
	t.Helper()
	logBefore, err := b.driverLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kBefore, dBefore := b.scrape(ctx, t)
	s := b.batch(ctx, t, claim, n)
	want := 0
	if claim {
		want = n
	}
	log := b.logSince(ctx, t, logBefore, want)
	s.prepare, s.unprepare = tookFromLog(t, log, "prepare"), tookFromLog(t, log, "unprepare")
	kAfter, dAfter := b.scrape(ctx, t)
	s.kubeletPrepare, s.kubeletUnprepare = kAfter[0].minus(kBefore[0]), kAfter[1].minus(kBefore[1])
	s.driverPrepare, s.driverUnprepare = dAfter[0].minus(dBefore[0]), dAfter[1].minus(dBefore[1])
	switch {
	case claim && len(s.prepare) == 0:
		t.Logf("the driver's log has no prepare the bench can read (slog's or klog's text format):\n%s", log)
	case len(s.prepare) != want:
		t.Errorf("the driver logged %d prepares for %d claim pods:\n%s", len(s.prepare), want, log)
	}
	return s
}

// logSince waits, for at most half a minute, until the driver's log,
// after before, records unprepares unprepares (the claims are freed just
// before the driver logs it), and returns that part of the log.
func (b *bench) logSince(ctx context.Context, t *testing.T, before string, unprepares int) string {
	t.Helper()
	var log string
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := waitFor(ctx, fmt.Sprintf("%d unprepares in the driver's log", unprepares), func(ctx context.Context) error {
		all, err := b.driverLog(ctx)
		if err != nil {
			return err
		}
		log = strings.TrimPrefix(all, before)
		if got := len(tookFromLog(t, log, "unprepare")); got < unprepares {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	}, b.c.Kubelet)
	if err != nil {
		t.Logf("%v; the log:\n%s", err, log)
	}
	return log
}

// driverLog is the driver pod's log so far.
func (b *bench) driverLog(ctx context.Context) (string, error) {
	data, err := b.c.api.get(ctx, b.c.url("/containerLogs/"+draNamespace+"/"+b.driverPod+"/driver"))
	return string(data), err
}

// scrape reads the kubelet's prepare and unprepare gRPC histograms of the
// tty driver and, with --metrics-address, the driver's own.
func (b *bench) scrape(ctx context.Context, t *testing.T) (kubelet, driver [2]histogram) {
	t.Helper()
	text, err := b.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, method := range []string{"NodePrepareResources", "NodeUnprepareResources"} {
		kubelet[i], err = histograms(text, "dra_grpc_operations_duration_seconds", func(l map[string]string) bool {
			return l["driver_name"] == draDriver && strings.HasSuffix(l["method_name"], method)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if b.metricsURL == "" {
		return kubelet, driver
	}
	plain := &client{http: &http.Client{Timeout: 10 * time.Second}}
	data, err := plain.get(ctx, b.metricsURL)
	if err != nil {
		t.Fatalf("the driver's metrics: %v", err)
	}
	for i, name := range []string{"cdi_exec_prepare_duration_seconds", "cdi_exec_unprepare_duration_seconds"} {
		driver[i], err = histograms(string(data), name, func(l map[string]string) bool { return l["driver"] == draDriver })
		if err != nil {
			t.Fatal(err)
		}
	}
	return kubelet, driver
}

// tookRE matches the driver's log line of a prepare or unprepare that
// succeeded, as slog's text handler writes it (msg=prepare ... took=12ms)
// and as klog's text format does (] "prepare" ... took="12ms").
var tookRE = regexp.MustCompile(`(?:\bmsg=(prepare|unprepare) |\] "(prepare|unprepare)" ).*?\btook="?([0-9][0-9.a-zµ]*)`)

// tookFromLog returns the took of each op ("prepare" or "unprepare") the
// log records.
func tookFromLog(t *testing.T, log, op string) []time.Duration {
	var out []time.Duration
	for _, m := range tookRE.FindAllStringSubmatch(log, -1) {
		if m[1]+m[2] != op {
			continue
		}
		d, err := time.ParseDuration(m[3])
		if err != nil {
			t.Fatalf("took=%s: %v", m[3], err)
		}
		out = append(out, d)
	}
	return out
}

// batch creates n pods of a kind at once and times each until it runs,
// then deletes them and waits until their claims are gone and freed.
func (b *bench) batch(ctx context.Context, t *testing.T, claim bool, n int) sample {
	t.Helper()
	b.seq++
	id := fmt.Sprintf("bench-%d", b.seq)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events, err := b.c.watchRunning(wctx, "bench="+id)
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]time.Time{}
	errs := make([]error, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		p := PodSpec{Name: fmt.Sprintf("%s-%d", id, i), Script: "exec sleep 3600", Labels: map[string]string{"bench": id}}
		if claim {
			p.ClaimTemplate = benchTemplate
		}
		wg.Go(func() {
			start := time.Now()
			errs[i] = b.c.Create(ctx, "/api/v1/namespaces/default/pods", p.Manifest())
			mu.Lock()
			created[p.Name] = start
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	running := map[string]time.Time{}
	for len(running) < n {
		select {
		case ev, ok := <-events:
			if !ok || ev.err != nil {
				t.Fatalf("the watch of %s: %d of %d pods running: %v", id, len(running), n, ev.err)
			}
			running[ev.name] = ev.at
		case <-ctx.Done():
			t.Fatalf("%d of %d pods of %s run: %v", len(running), n, id, ctx.Err())
		}
	}
	var s sample
	first, last := time.Time{}, time.Time{}
	for name, at := range running {
		s.starts = append(s.starts, at.Sub(created[name]))
		if first.IsZero() || created[name].Before(first) {
			first = created[name]
		}
		if at.After(last) {
			last = at
		}
	}
	s.all = last.Sub(first)
	b.removeBatch(ctx, t, id)
	return s
}

// removeBatch deletes the batch's pods and waits until their claims are
// gone and the plugins hold nothing.
func (b *bench) removeBatch(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	if _, err := b.c.Kubectl(ctx, "delete", "pods", "-l", "bench="+id, "--grace-period=0", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	err := waitFor(ctx, "the batch's claims to be deleted", func(ctx context.Context) error {
		var l resourceapi.ResourceClaimList
		if err := b.c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", &l); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d claims left", len(l.Items))
		}
		return nil
	}, b.c.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	b.waitFreed(ctx, t, nil)
}

// podRunning is when the watch first showed the pod's container running,
// or, as the last one before the watch ends, why it ended.
type podRunning struct {
	name string
	at   time.Time
	err  error
}

// watchRunning watches the default namespace's pods with the label
// selector and sends each pod's name when the API server first shows its
// container running, with the time the event arrived. The channel closes
// when the watch ends (ctx ends it).
func (c *Cluster) watchRunning(ctx context.Context, selector string) (<-chan podRunning, error) {
	// resourceVersion 0 starts from the watch cache as it is: without it
	// the API server waits for the cache to reach etcd's latest revision,
	// which with Debian's etcd 3.4 (no progress notifications) takes an
	// event in pods, and gives up after 3 s. The pods it watches are yet
	// to be made, so a stale start misses nothing.
	u := Server + "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0&labelSelector=" + url.QueryEscape(selector)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	// The admin client's transport, without its timeout: ctx bounds the
	// watch.
	resp, err := (&http.Client{Transport: c.admin.http.Transport}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("watching pods: %s", resp.Status)
	}
	out := make(chan podRunning)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		send := func(r podRunning) bool {
			select {
			case out <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		dec := json.NewDecoder(resp.Body)
		seen := map[string]bool{}
		for {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			var pod Pod
			err := dec.Decode(&ev)
			at := time.Now()
			if err == nil && ev.Type == "ERROR" {
				err = fmt.Errorf("%s", ev.Object)
			}
			if err == nil {
				err = json.Unmarshal(ev.Object, &pod)
			}
			if err != nil {
				send(podRunning{err: fmt.Errorf("the watch ended: %w", err)})
				return
			}
			name := pod.Metadata.Name
			if ev.Type == "DELETED" || seen[name] || Running(pod, true) != nil {
				continue
			}
			seen[name] = true
			if !send(podRunning{name: name, at: at}) {
				return
			}
		}
	}()
	return out, nil
}

// phase is the samples of one kind of pod and one batch size.
type phase struct{ samples []sample }

func (p *phase) add(s sample) { p.samples = append(p.samples, s) }

// starts is every pod's start; alls every batch's time until all ran.
func (p *phase) starts() []time.Duration {
	var out []time.Duration
	for _, s := range p.samples {
		out = append(out, s.starts...)
	}
	return out
}

func (p *phase) alls() []time.Duration {
	var out []time.Duration
	for _, s := range p.samples {
		out = append(out, s.all)
	}
	return out
}

// took gathers the driver's logged prepares (unprepare false) or
// unprepares of the phase.
func (p *phase) took(unprepare bool) []time.Duration {
	var out []time.Duration
	for _, s := range p.samples {
		if unprepare {
			out = append(out, s.unprepare...)
		} else {
			out = append(out, s.prepare...)
		}
	}
	return out
}

// hist merges a histogram of the phase's samples.
func (p *phase) hist(pick func(sample) histogram) histogram {
	var h histogram
	for _, s := range p.samples {
		x := pick(s)
		if len(h.bounds) == 0 {
			h = histogram{bounds: x.bounds, counts: slices.Clone(x.counts)}
		} else {
			for i := range min(len(h.counts), len(x.counts)) {
				h.counts[i] += x.counts[i]
			}
		}
		h.sum += x.sum
		h.count += x.count
	}
	return h
}

// quantile is the nearest-rank q-quantile of d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// report is make bench-k8s's table.
type report struct {
	runs, batches, size int
	seq, par            map[bool]*phase // by whether the pods have a claim
	load                string
	metrics             bool // whether the driver serves metrics
}

func (r report) sequentialRatio() float64 {
	return ratio(quantile(r.seq[true].starts(), .5), quantile(r.seq[false].starts(), .5))
}

func (r report) batchRatio() float64 {
	return ratio(quantile(r.par[true].alls(), .5), quantile(r.par[false].alls(), .5))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// misses names the targets the run missed.
func (r report) misses() []string {
	var out []string
	if x := r.sequentialRatio(); x > targetSequential {
		out = append(out, fmt.Sprintf("a claim adds %.1f%% to the median pod start (target ≤ %.0f%%)", (x-1)*100, (targetSequential-1)*100))
	}
	if x := r.batchRatio(); x > targetBatch {
		out = append(out, fmt.Sprintf("%d claim pods ran in %.2f× the time of %d without (target ≤ %.2f×)", r.size, x, r.size, targetBatch))
	}
	return out
}

func verdict(x, target float64) string {
	if x <= target {
		return fmt.Sprintf("≤ %.2f× ✓", target)
	}
	return fmt.Sprintf("≤ %.2f× ✗", target)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func msf(seconds float64) string {
	if math.IsNaN(seconds) {
		return "–"
	}
	return fmt.Sprintf("%.1f ms", seconds*1000)
}

func (r report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod start, create call to the container running (watch), %s\n\n", r.load)
	fmt.Fprintf(&b, "| | no claim | one-tty claim | ratio | target |\n|---|---|---|---|---|\n")
	row := func(name string, plain, claim time.Duration, target string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f× | %s |\n", name, ms(plain), ms(claim), ratio(claim, plain), target)
	}
	sp, sc := r.seq[false].starts(), r.seq[true].starts()
	row(fmt.Sprintf("one at a time, median (%d runs)", r.runs), quantile(sp, .5), quantile(sc, .5), verdict(r.sequentialRatio(), targetSequential))
	row("one at a time, p90", quantile(sp, .9), quantile(sc, .9), "")
	ap, ac := r.par[false].alls(), r.par[true].alls()
	row(fmt.Sprintf("%d at once, all running, median (%d batches)", r.size, r.batches), quantile(ap, .5), quantile(ac, .5), verdict(r.batchRatio(), targetBatch))
	row(fmt.Sprintf("%d at once, all running, worst", r.size), slices.Max(ap), slices.Max(ac), "")
	pp, pc := r.par[false].starts(), r.par[true].starts()
	row(fmt.Sprintf("%d at once, each pod, median", r.size), quantile(pp, .5), quantile(pc, .5), "")
	row(fmt.Sprintf("%d at once, each pod, p90", r.size), quantile(pp, .9), quantile(pc, .9), "")

	fmt.Fprintf(&b, "\nPrepare and unprepare of the one-tty claims\n\n")
	fmt.Fprintf(&b, "| | source | n | mean | median | p90 |\n|---|---|---|---|---|---|\n")
	for _, k := range []struct {
		name string
		p    *phase
	}{{"one at a time", r.seq[true]}, {fmt.Sprintf("%d at once", r.size), r.par[true]}} {
		for _, op := range []struct {
			name      string
			unprepare bool
			kubelet   func(sample) histogram
			driver    func(sample) histogram
		}{
			{"prepare", false, func(s sample) histogram { return s.kubeletPrepare }, func(s sample) histogram { return s.driverPrepare }},
			{"unprepare", true, func(s sample) histogram { return s.kubeletUnprepare }, func(s sample) histogram { return s.driverUnprepare }},
		} {
			name := op.name + ", " + k.name
			took := k.p.took(op.unprepare)
			fmt.Fprintf(&b, "| %s | driver log (took) | %d | %s | %s | %s |\n", name, len(took), msf(mean(took)), ms(quantile(took, .5)), ms(quantile(took, .9)))
			writeHist(&b, name, "kubelet gRPC (dra_grpc_operations_duration_seconds)", k.p.hist(op.kubelet))
			if r.metrics {
				writeHist(&b, name, "driver /metrics (cdi_exec_"+op.name+"_duration_seconds)", k.p.hist(op.driver))
			} else {
				fmt.Fprintf(&b, "| %s | no metrics: the driver has no --metrics-address | | | | |\n", name)
			}
		}
	}
	b.WriteString("\nHistogram medians and p90s are estimated from the buckets; their means are exact.\n")
	var busy []time.Duration
	for _, s := range r.par[true].samples {
		var sum time.Duration
		for _, d := range s.prepare {
			sum += d
		}
		busy = append(busy, sum)
	}
	fmt.Fprintf(&b, "The %d prepares of a batch spent %s in the driver in all (median of %d batches); the claim pods' batch ran %s longer than the batch without claims.\n",
		r.size, ms(quantile(busy, .5)), r.batches, ms(quantile(ac, .5)-quantile(ap, .5)))
	return b.String()
}

func writeHist(b *strings.Builder, name, source string, h histogram) {
	fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %s |\n", name, source, h.count, msf(h.mean()), estimate(h, .5), estimate(h, .9))
}

// estimate is the histogram's q-quantile as text: ≈ the estimate, or
// ≤ the lowest bound when it lies in the lowest bucket, where the
// estimate says nothing (the kubelet's lowest is 100 ms).
func estimate(h histogram, q float64) string {
	x := h.quantile(q)
	if len(h.bounds) > 0 && x <= h.bounds[0] {
		return "≤ " + msf(h.bounds[0])
	}
	return "≈ " + msf(x)
}

func mean(d []time.Duration) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum.Seconds() / float64(len(d))
}
