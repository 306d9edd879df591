package deviceplugin

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cdi-exec/plugins/internal/cdispec"
	"github.com/cdi-exec/plugins/internal/kubelet/claimstate"
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/request"
)

// resource is one resource type served to the kubelet: its configs, what
// their plugins reported last, and its garbage-collection state. It is the
// Backend of its type.
type resource struct {
	name    string // "<prefix>/<type>"
	typ     string
	confs   []caller.Config
	specs   []*cdispec.Config // each config's cdi_spec (specsOf)
	caller  caller.Caller
	log     *slog.Logger
	metrics *metrics.Metrics
	gc      *podgc.Tracker
	// claims are the DRA mode's records of the type's claims (claims.go),
	// nil when there are none to collect; claimGC tracks their UIDs.
	claims  *claimstate.File
	claimGC *podgc.Tracker
	poke    chan struct{} // asks the poll loop for a poll now

	// handout serialises Allocate and the garbage collector's frees, so
	// that an id the kubelet hands out again is never freed under it.
	handout sync.Mutex

	// poller asks the plugins for their devices and keeps their answers.
	poller *inventory.Poller

	mu      sync.Mutex
	skipped []string // keys already warned about
	devs    []Device
	changed chan struct{} // closed when devs changes
}

func newResource(name, typ string, confs []caller.Config, c caller.Caller, log *slog.Logger, m *metrics.Metrics, grace time.Duration) *resource {
	log = log.With("resource", name)
	return &resource{
		name: name, typ: typ, confs: confs, specs: specsOf(confs, log), caller: c, log: log, metrics: m,
		gc: podgc.NewTracker(grace), claimGC: podgc.NewTracker(grace), poke: make(chan struct{}, 1),
		poller:  inventory.NewPoller(c, confs, log),
		changed: make(chan struct{}),
	}
}

// Devices implements Backend.
func (r *resource) Devices() ([]Device, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.devs, r.changed
}

// refresh asks every config's plugin for its devices (the poller's
// Refresh) and publishes the result.
func (r *resource) refresh(ctx context.Context) {
	failed, ok := r.poller.Refresh(ctx)
	for range failed {
		r.metrics.PollFailed(r.name)
	}
	if !ok {
		return
	}
	inv := r.poller.Inventory()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range inv.Skipped {
		if !slices.Contains(r.skipped, k) {
			r.log.Warn("device not offered: its key cannot be named in a pinned ADD", "key", k)
		}
	}
	r.skipped = inv.Skipped
	devs := offer(inv, r.typ)
	if !visiblyEqual(devs, r.devs) {
		r.devs = devs
		close(r.changed)
		r.changed = make(chan struct{})
		r.log.Info("devices changed", "devices", len(devs), "healthy", healthy(devs))
	}
	r.devs = devs // Free may have changed; the kubelet does not see it
	n := healthy(devs)
	r.metrics.Published(r.name, n, len(devs)-n)
}

// visiblyEqual compares what ListAndWatch sends.
func visiblyEqual(a, b []Device) bool {
	return slices.EqualFunc(a, b, func(x, y Device) bool {
		return x.ID == y.ID && x.NUMA == y.NUMA && x.Healthy == y.Healthy
	})
}

func healthy(devs []Device) int {
	n := 0
	for _, d := range devs {
		if d.Healthy {
			n++
		}
	}
	return n
}

// pollNow asks the poll loop for an early poll.
func (r *resource) pollNow() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// poll refreshes the devices every interval, and when poked, until ctx
// ends.
func (r *resource) poll(ctx context.Context, interval time.Duration) {
	inventory.Every(ctx, interval, r.poke, func() { r.refresh(ctx) })
}

// Allocate implements Backend: one pinned ADD per config that
// owns some of ids, under the id the device set determines.
func (r *resource) Allocate(ctx context.Context, ids []string) (*Allocation, error) {
	start := time.Now()
	id := podgc.RequestID(r.name, r.typ, ids)
	r.handout.Lock()
	defer r.handout.Unlock()
	r.gc.Touch(id, start)
	a, err := r.add(ctx, id, ids)
	r.pollNow()
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		r.log.Error("allocate failed", "devices", ids, "requestId", id, "took", took, "err", err)
		return nil, grpcError(err)
	}
	r.log.Info("allocate", "devices", ids, "requestId", id, "nodes", a.Nodes, "cdiDevices", a.CDIDevices, "took", took)
	return a, nil
}

// add runs the pinned ADDs of the devices ids under id, one per config
// that owns some of them, and returns what the container gets. The
// caller holds handout.
func (r *resource) add(ctx context.Context, id string, ids []string) (*Allocation, error) {
	a := &Allocation{}
	inv := r.poller.Inventory()
	for _, g := range inv.Groups(inv.Order(ids)) {
		added, err := r.caller.AddDevices(ctx, r.confs[g.Conf], id, request.Spec{Type: r.typ}, inv.Units(g.Keys))
		if err != nil {
			return nil, err
		}
		a.Nodes = append(a.Nodes, added.Devices...)
		a.CDIDevices = append(a.CDIDevices, added.CDIDevices...)
	}
	return a, nil
}
