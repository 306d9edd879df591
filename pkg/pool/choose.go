package pool

import (
	"context"
	"errors"
	"time"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/alloc"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/store"
)

// picker chooses the devices of one request item among devs, the usable
// devices present, in discovery order; free reports whether a device may
// be handed out (no request holds it and no earlier item of this request
// took it). byCount chooses by count; byKeys (pin.go) takes the devices a
// pinned ADD names (CDI_REQUEST_DEVICES), and adder.replay checks a
// replayed pinned item against the recorded keys.
type picker func(item abnf.Item, devs []Device, free func(key string) bool) ([]Device, error)

// byCount chooses item.Amount free devices by alloc's rules
// (docs/protocol.md#choice-rules): the requested locality first (mandatory
// when strict), then the nearest further nodes by dist, read only when the
// choice falls back to them; the fewest NUMA nodes; PCIe closeness; the
// lowest indices.
func byCount(locality []int, strict bool, dist func() alloc.Distances) picker {
	return func(item abnf.Item, devs []Device, free func(key string) bool) ([]Device, error) {
		var avail []Device
		var cands []alloc.Candidate
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
// Handout hook when the plugin has one, else each device's own nodes,
// resolved and checked now. It returns the allocation to record.
func (a *adder) allocate(ctx context.Context, item abnf.Item, devs []Device, free func(string) bool) (store.Allocation, error) {
	al := store.Allocation{Spec: item.Spec.String(), Amount: item.Amount, Created: time.Now().UTC()}
	if a.pool.Handout == nil {
		var err error
		al.Devices, err = a.resolved(ctx, item, devs, free)
		return al, err
	}
	chosen, err := a.pick(item, devs, free)
	if err != nil {
		return store.Allocation{}, err
	}
	h, err := a.pool.Handout(ctx, a.call, item, chosen)
	if err != nil {
		return store.Allocation{}, err
	}
	if h.Undo != nil {
		a.undos = append(a.undos, h.Undo)
	}
	al.Nodes, al.Delegate = protocol.NonNil(h.Nodes), h.Delegate
	for _, d := range chosen {
		al.Devices = append(al.Devices, store.Device{Key: d.Key, Nodes: d.Nodes, NUMA: a.pool.numa(ctx, a.call, d)})
	}
	return al, nil
}

// resolved chooses the devices of one item and resolves their nodes. A
// chosen device whose node fails its check (Device.Resolve) is left out and
// the choice made again, so a node is handed out only after it was checked
// live (docs/protocol.md#device-nodes).
func (a *adder) resolved(ctx context.Context, item abnf.Item, devs []Device, free func(string) bool) ([]store.Device, error) {
	bad := map[string]bool{}
	usable := func(key string) bool { return !bad[key] && free(key) }
	for {
		chosen, err := a.pick(item, devs, usable)
		if err != nil {
			return nil, err
		}
		out := make([]store.Device, 0, len(chosen))
		for _, d := range chosen {
			nodes, err := d.nodes()
			if err != nil {
				a.call.Warnf("not handing out %s: %v", d.Key, err)
				bad[d.Key] = true
				continue
			}
			out = append(out, store.Device{Key: d.Key, Nodes: nodes, NUMA: a.pool.numa(ctx, a.call, d)})
		}
		if len(out) == len(chosen) {
			return out, nil
		}
	}
}
