package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cdi-exec/plugins/internal/kubelet/deviceplugin"
	"github.com/cdi-exec/plugins/internal/kubelet/metrics"
	"github.com/cdi-exec/plugins/pkg/caller"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// resource is one resource type served to the kubelet: its configs, what
// their plugins reported last, and its garbage-collection state. It is the
// deviceplugin.Backend of its type.
type resource struct {
	name    string // "<prefix>/<type>"
	typ     string
	confs   []caller.Config
	caller  caller.Caller
	log     *slog.Logger
	metrics *metrics.Metrics
	gc      *tracker
	poke    chan struct{} // asks the poll loop for a poll now

	// handout serialises Allocate and the garbage collector's frees, so
	// that an id the kubelet hands out again is never freed under it.
	handout sync.Mutex

	mu      sync.Mutex
	answers [][]protocol.DeviceInfo // last good DEVICES answer per config
	failing []bool                  // whether the last DEVICES of a config failed
	inv     inventory
	devs    []deviceplugin.Device
	changed chan struct{} // closed when devs changes
}

func newResource(name, typ string, confs []caller.Config, c caller.Caller, log *slog.Logger, m *metrics.Metrics, grace time.Duration) *resource {
	return &resource{
		name: name, typ: typ, confs: confs, caller: c, log: log.With("resource", name), metrics: m,
		gc: newTracker(grace), poke: make(chan struct{}, 1),
		answers: make([][]protocol.DeviceInfo, len(confs)), failing: make([]bool, len(confs)),
		changed: make(chan struct{}),
	}
}

// Devices implements deviceplugin.Backend.
func (r *resource) Devices() ([]deviceplugin.Device, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.devs, r.changed
}

// refresh asks every config's plugin for its devices (Refresh) and
// publishes the result.
func (r *resource) refresh(ctx context.Context) {
	failed, ok := Refresh(ctx, r.caller, r.confs, &r.mu, r.answers, r.failing, r.log)
	for range failed {
		r.metrics.PollFailed(r.name)
	}
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	inv := merge(r.answers)
	for _, k := range inv.skipped {
		if !slices.Contains(r.inv.skipped, k) {
			r.log.Warn("device not offered: its key cannot be named in a pinned ADD", "key", k)
		}
	}
	r.inv = inv
	devs := inv.offer(r.typ)
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
func visiblyEqual(a, b []deviceplugin.Device) bool {
	return slices.EqualFunc(a, b, func(x, y deviceplugin.Device) bool {
		return x.ID == y.ID && x.NUMA == y.NUMA && x.Healthy == y.Healthy
	})
}

func healthy(devs []deviceplugin.Device) int {
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
	every(ctx, interval, r.poke, func() { r.refresh(ctx) })
}

// every calls fn every interval, and whenever poke delivers (a nil poke
// never does), until ctx ends.
func every(ctx context.Context, interval time.Duration, poke <-chan struct{}, fn func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-poke:
		}
		fn()
	}
}

// Allocate implements deviceplugin.Backend: one pinned ADD per config that
// owns some of ids, under the id the device set determines.
func (r *resource) Allocate(ctx context.Context, ids []string) (*deviceplugin.Allocation, error) {
	start := time.Now()
	id := requestID(r.name, r.typ, ids)
	r.handout.Lock()
	defer r.handout.Unlock()
	r.gc.Touch(id, start)
	a := &deviceplugin.Allocation{}
	var err error
	for _, g := range r.groups(ids) {
		var added *caller.Added
		added, err = r.caller.AddDevices(ctx, r.confs[g.conf], id, request.Spec{Type: r.typ}, g.keys)
		if err != nil {
			break
		}
		a.Nodes = append(a.Nodes, added.Devices...)
		var names []string
		if raw, ok := added.Extra["cdiDevices"]; ok && json.Unmarshal(raw, &names) == nil {
			a.CDIDevices = append(a.CDIDevices, names...)
		}
	}
	r.pollNow()
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		r.log.Error("allocate failed", "devices", ids, "requestId", id, "took", took, "err", err)
		return nil, grpcError(err)
	}
	r.log.Info("allocate", "devices", ids, "requestId", id, "nodes", a.Nodes, "cdiDevices", a.CDIDevices, "took", took)
	return a, nil
}

// group is the keys one config's plugin is asked for.
type group struct {
	conf int
	keys []string
}

// groups splits ids by the config that reported them, in the inventory's
// order. A key the inventory does not know goes to the first config, whose
// plugin then says what is wrong with it.
func (r *resource) groups(ids []string) []group {
	r.mu.Lock()
	defer r.mu.Unlock()
	owner := map[string]int{}
	var order []string
	for _, e := range r.inv.entries {
		if slices.Contains(ids, e.Key) {
			owner[e.Key] = e.conf
			order = append(order, e.Key)
		}
	}
	for _, k := range ids {
		if _, ok := owner[k]; !ok {
			owner[k] = 0
			order = append(order, k)
		}
	}
	var gs []group
	for _, k := range order {
		i := slices.IndexFunc(gs, func(g group) bool { return g.conf == owner[k] })
		if i < 0 {
			gs = append(gs, group{conf: owner[k]})
			i = len(gs) - 1
		}
		gs[i].keys = append(gs[i].keys, k)
	}
	slices.SortFunc(gs, func(a, b group) int { return a.conf - b.conf })
	return gs
}
