package pool

import (
	"errors"
	"slices"
	"time"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/rawjson"
	"github.com/cdi-exec/plugins/internal/store"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// picker chooses the devices of one request item among devs, the usable
// devices present, in discovery order; free reports whether a device may
// be handed out (no request holds it and no earlier item of this request
// took it). byCount chooses by count; byKeys (pin.go) takes the devices a
// pinned ADD names (CDI_REQUEST_DEVICES), and adder.replay checks a
// replayed pinned item against the recorded keys.
type picker func(item request.Item, devs []Device, free func(key string) bool) ([]Device, error)

// byCount chooses item.Amount free devices by alloc's rules
// (docs/protocol.md#choice-rules): the requested locality first (mandatory
// when strict), then the nearest further nodes by dist, read only when the
// choice falls back to them; the fewest NUMA nodes; PCIe closeness; the
// lowest indices.
func byCount(locality []int, strict bool, dist func() alloc.Distances) picker {
	return func(item request.Item, devs []Device, free func(key string) bool) ([]Device, error) {
		avail := make([]Device, 0, len(devs))
		cands := make([]alloc.Candidate, 0, len(devs))
		for _, d := range devs {
			if free(d.Key) {
				avail = append(avail, d)
				cands = append(cands, alloc.Candidate{Index: d.Index, NUMA: d.NUMA, PCIe: d.PCIe})
			}
		}
		req := alloc.Request{N: item.Amount, Locality: locality, Strict: strict}
		if alloc.NeedsDistances(cands, req) {
			req.Distances = dist()
		}
		pos, err := alloc.Choose(cands, req)
		switch {
		case errors.Is(err, alloc.ErrInsufficient):
			return nil, protocol.Errorf(protocol.CodeInsufficient, "%s: %v", item.Spec, err)
		case errors.Is(err, alloc.ErrLocality):
			return nil, protocol.Errorf(protocol.CodeNUMA, "%s: %v (numa_policy is strict)", item.Spec, err)
		case err != nil:
			return nil, err
		}
		chosen := make([]Device, len(pos))
		for j, i := range pos {
			chosen[j] = avail[i]
		}
		return chosen, nil
	}
}

// allocate chooses the devices of one request item and sets them up: the
// plugin's Setup when it has one, else each device's own nodes, checked
// live now. It returns the allocation to record.
func (a *adder) allocate(item request.Item) (store.Allocation, error) {
	if err := a.work.Err(); err != nil {
		return store.Allocation{}, protocol.Errorf(protocol.CodeInternal, "ADD ran out of time holding the store: %w", err)
	}
	chosen, nodes, err := a.choose(item)
	if err != nil {
		return store.Allocation{}, err
	}
	al := store.Allocation{Spec: item.Spec.String(), Amount: item.Amount, Created: time.Now().UTC()}
	if a.pool.Setup == nil {
		al.Nodes = a.pool.arrange(nodes)
	} else {
		h, err := a.pool.Setup.Handout(a.work, a.call, item, chosen)
		if err != nil {
			return store.Allocation{}, err
		}
		if h.Undo != nil {
			a.undos = append(a.undos, h.Undo)
		}
		al.Nodes, al.Delegate = rawjson.NonNil(h.Nodes), h.Delegate
	}
	for j, d := range chosen {
		own := d.Nodes
		if nodes != nil {
			own = nodes[j]
		}
		al.Devices = append(al.Devices, store.Device{Key: d.Key, Nodes: own, NUMA: a.pool.numa(a.work, a.call, d)})
		a.taken[d.Key] = true
	}
	a.held = append(a.held, answer{al, true})
	return al, nil
}

// arrange takes the shared nodes (Pool.Shared) out of each device's nodes,
// in place, and returns the allocation's node list: every device's own
// nodes in order, then each shared node once, in Pool.Shared's order. It
// returns nil, changing nothing, when no device brings a shared node:
// the allocation's nodes are then its devices' (store.Allocation.Nodes).
func (p Pool) arrange(nodes [][]string) []string {
	brought := make([]bool, len(p.Shared))
	some := false
	for _, own := range nodes {
		for _, n := range own {
			if i := slices.Index(p.Shared, n); i >= 0 {
				brought[i], some = true, true
			}
		}
	}
	if !some {
		return nil
	}
	var out []string
	for j, own := range nodes {
		nodes[j] = slices.DeleteFunc(own, func(n string) bool { return slices.Contains(p.Shared, n) })
		out = append(out, nodes[j]...)
	}
	for i, n := range p.Shared {
		if brought[i] {
			out = append(out, n)
		}
	}
	return out
}

// choose picks the devices of one request item and, unless the plugin's
// Setup makes the nodes, checks each live (Device.Live) and returns its
// nodes. Discovery may have answered from a cache, so the first device
// that fails its check makes ADD discover again, reading the host, and
// choose again among what it found; a device that fails after that is
// left out and the choice made once more. A node is thus handed out only
// after it was checked live (docs/performance.md#discovery-cache).
func (a *adder) choose(item request.Item) ([]Device, [][]string, error) {
	bad := map[string]bool{}
	for {
		devs := a.devs
		if len(bad) > 0 { // left out as not usable, not as held (a pinned ADD says which)
			devs = slices.DeleteFunc(slices.Clone(devs), func(d Device) bool { return bad[d.Key] })
		}
		chosen, err := a.pick(item, devs, a.free)
		if err != nil || a.pool.Setup != nil {
			return chosen, nil, err
		}
		nodes := make([][]string, len(chosen))
		failed := false
		for j, d := range chosen {
			if nodes[j], err = d.nodes(); err != nil {
				a.call.Warnf("not handing out %s: %v", d.Key, err)
				bad[d.Key], failed = true, true
			}
		}
		if !failed {
			return chosen, nodes, nil
		}
		if !a.rescanned {
			a.rescanned = true
			clear(bad)
			if err := a.discover(true); err != nil {
				return nil, nil, err
			}
		}
	}
}
