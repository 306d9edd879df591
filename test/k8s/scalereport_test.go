//go:build e2enode

package k8se2e

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The targets of make bench-scale at 100 nodes (issue 42): every slice
// published within 30 s; pods bound a second with our claims at least
// 0.9× the floor's; per driver at most 48 MiB of RSS and 2 API requests
// an idle minute; the RSS with the tenant claims within 2 MiB of the RSS
// without; no WATCH of ResourceClaims from the drivers.
const (
	targetPublish      = 30 * time.Second
	targetSchedRatio   = 0.90
	targetRSS          = 48 << 20
	targetIdleRequests = 2
	targetFlat         = 2 << 20
)

// scaleReport is make bench-scale's table.
type scaleReport struct {
	cfg          scaleConfig
	load         string
	ours, floor  published
	perNode      nodeDevices // our first node's devices, by driver
	idle         idle
	flat         flat
	watchesAudit int     // the drivers' open WATCHes of claims, by the audit log
	watchBase    float64 // apiserver_longrunning_requests of claim WATCHes before the drivers
	watchGauge   float64 // the same with the drivers and the tenant claims
	sched        []schedPair
	logErrors    int    // error lines in the drivers' logs
	firstError   string // the first of them
}

// fquantile is the nearest-rank q-quantile of x.
func fquantile(x []float64, q float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(x))
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// drivers is the entries of ours, without the floor's last one.
func driversOf[T any](x []T) []T {
	if len(x) == 0 {
		return nil
	}
	return x[:len(x)-1]
}

func floats[T int64 | float64](x []T) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// rssDelta is each driver's RSS with the tenant claims less without.
func (r scaleReport) rssDelta() []float64 {
	var out []float64
	for i := range driversOf(r.idle.rss) {
		if i < len(r.flat.rss) {
			out = append(out, float64(r.flat.rss[i]-r.idle.rss[i]))
		}
	}
	return out
}

// scaleCheck is one target: met, what was measured, the target.
type scaleCheck struct {
	name, measured, target string
	met                    bool
}

func (r scaleReport) checks() []scaleCheck {
	rss := floats(driversOf(r.idle.rss))
	delta := r.rssDelta()
	out := []scaleCheck{
		{"every slice published", fmt.Sprintf("%.1f s", r.ours.all.Seconds()), fmt.Sprintf("≤ %.0f s", targetPublish.Seconds()), r.ours.all <= targetPublish},
	}
	for _, p := range r.sched {
		if !p.ours.target {
			continue
		}
		x := p.oursRes.rate() / p.floorRes.rate()
		out = append(out, scaleCheck{"pods bound a second, " + p.ours.name + ": ours / floor", fmt.Sprintf("%.2f×", x), fmt.Sprintf("≥ %.2f×", targetSchedRatio), x >= targetSchedRatio})
	}
	out = append(out,
		scaleCheck{"RSS per driver, max", mib(slices.Max(rss)), "≤ " + mib(targetRSS), slices.Max(rss) <= targetRSS},
		scaleCheck{"API requests per idle minute per driver, max", fmt.Sprintf("%.1f", slices.Max(r.idle.requests)), fmt.Sprintf("≤ %d", targetIdleRequests), slices.Max(r.idle.requests) <= targetIdleRequests},
		scaleCheck{fmt.Sprintf("RSS with %d tenant claims − without, per driver, max", r.flat.claims), "+" + mib(slices.Max(delta)), "≤ " + mib(targetFlat), slices.Max(delta) <= targetFlat},
		scaleCheck{"open WATCHes of resourceclaims from the drivers", fmt.Sprint(r.watchesAudit), "0", r.watchesAudit == 0},
	)
	return out
}

// misses names the targets the run missed.
func (r scaleReport) misses() []string {
	var out []string
	for _, c := range r.checks() {
		if !c.met {
			out = append(out, fmt.Sprintf("%s: %s, target %s", c.name, c.measured, c.target))
		}
	}
	return out
}

func (r scaleReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Scale: %d simulated nodes of ours (%s devices each: %s) and %d of the floor's (%d devices each, no attributes); %d pods a scheduling scenario, %d rounds; %s\n\n",
		r.cfg.nodes, fmt.Sprint(r.perNode.total()), r.perNode, r.cfg.nodes, r.perNode.total(), r.cfg.pods, r.cfg.rounds, r.load)
	fmt.Fprintf(&b, "| measure | ours | floor | ours / floor |\n|---|---|---|---|\n")
	per := slices.Clone(r.ours.perNode)
	fmt.Fprintf(&b, "| every slice published, from the first process's start | %.1f s (%d at a time; one node's, median %.1f s, max %.1f s) | %.1f s (one process) | |\n",
		r.ours.all.Seconds(), r.cfg.start, quantile(per, .5).Seconds(), slices.Max(per).Seconds(), r.floor.all.Seconds())
	for _, p := range r.sched {
		note := ""
		if !p.ours.target {
			note = " (no target)"
		}
		fmt.Fprintf(&b, "| pods bound a second: %s (floor: %s) | %.1f | %.1f | %.2f×%s |\n",
			p.ours.name, p.floor.name, p.oursRes.rate(), p.floorRes.rate(), p.oursRes.rate()/p.floorRes.rate(), note)
	}
	rss := floats(driversOf(r.idle.rss))
	anon := floats(driversOf(r.idle.anon))
	fmt.Fprintf(&b, "| RSS per driver, median / max (its RssAnon: median / max) | %s / %s (%s / %s) | %s (%s; one process, %d nodes) | |\n",
		mib(fquantile(rss, .5)), mib(slices.Max(rss)), mib(fquantile(anon, .5)), mib(slices.Max(anon)),
		mib(float64(r.idle.rss[len(r.idle.rss)-1])), mib(float64(r.idle.anon[len(r.idle.anon)-1])), r.cfg.nodes)
	cpu, plug := driversOf(r.idle.cpu), r.idle.cpuChildren
	fmt.Fprintf(&b, "| CPU-seconds per idle minute per driver, median / max | %.2f / %.2f (its plugins: %.2f / %.2f) | %.2f (one process) | |\n",
		fquantile(cpu, .5), slices.Max(cpu), fquantile(plug, .5), slices.Max(plug), r.idle.cpu[len(r.idle.cpu)-1])
	fmt.Fprintf(&b, "| API requests per idle minute per driver, median / max | %.1f / %.1f | %.2f per node (%.1f in all) | |\n",
		fquantile(r.idle.requests, .5), slices.Max(r.idle.requests), r.idle.floorRequests/float64(r.cfg.nodes), r.idle.floorRequests)
	delta := r.rssDelta()
	fmt.Fprintf(&b, "| RSS with %d tenant claims (4 KiB of config each) − without, per driver, median / max | %+.1f / %+.1f MiB | %+.1f MiB | |\n",
		r.flat.claims, fquantile(delta, .5)/(1<<20), slices.Max(delta)/(1<<20),
		float64(r.flat.rss[len(r.flat.rss)-1]-r.idle.rss[len(r.idle.rss)-1])/(1<<20))
	fmt.Fprintf(&b, "| open WATCHes of resourceclaims from the drivers (audit log) | %d | | |\n", r.watchesAudit)
	fmt.Fprintf(&b, "\napiserver_longrunning_requests{resource=\"resourceclaims\",verb=\"WATCH\"}: %.0f before the drivers started (the control plane's), %.0f with them and the tenant claims.\n",
		r.watchBase, r.watchGauge)
	fmt.Fprintf(&b, "apiserver_request_total over the idle minute, every client: %.0f a minute.\n", r.idle.apiTotal)
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.idle.byKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.idle.byKind[k]))
	}
	if len(kinds) == 0 {
		kinds = []string{"none"}
	}
	fmt.Fprintf(&b, "The drivers' requests in the idle minute (%s), all drivers: %s.\n", r.cfg.idle, strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "%d tenant claims created in %.1f s.\n", r.flat.claims, r.flat.took.Seconds())
	for _, p := range r.sched {
		fmt.Fprintf(&b, "%s: %d claims checked, every device allocated once, on its pod's node", p.ours.name, p.checked)
		if p.ours.pcie {
			fmt.Fprintf(&b, "; %d pairs across roots", p.crossRoots)
		}
		b.WriteString(".\n")
	}
	if r.logErrors > 0 {
		fmt.Fprintf(&b, "The drivers' logs have %d error lines; the first: %s\n", r.logErrors, r.firstError)
	} else {
		b.WriteString("The drivers' logs have no error line.\n")
	}
	fmt.Fprintf(&b, "\nTargets\n\n| target | measured | | |\n|---|---|---|---|\n")
	for _, c := range r.checks() {
		v := "✓"
		if !c.met {
			v = "✗"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.name, c.measured, c.target, v)
	}
	return b.String()
}

// TestBenchMetricProc checks the bench's reading of a process's CPU
// time and RSS from /proc, on the test's own process: it needs no node.
func TestBenchMetricProc(t *testing.T) {
	before, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Work until the kernel has counted at least a tick of it.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		after, err := readProc(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.self > before.self {
			if after.rss < 1<<20 || after.rss > 1<<34 || after.anon <= 0 || after.anon > after.rss {
				t.Errorf("RSS %d bytes, of them anonymous %d", after.rss, after.anon)
			}
			return
		}
		for i := range 1_000_000 {
			_ = fmt.Sprint(i)
		}
	}
	t.Error("no CPU time counted after 10 s of work")
}
