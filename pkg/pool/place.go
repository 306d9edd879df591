package pool

import (
	"slices"
	"sync"

	"github.com/cdi-exec/plugins/pkg/abnf"
	"github.com/cdi-exec/plugins/pkg/alloc"
	"github.com/cdi-exec/plugins/pkg/sysfs"
)

// placed fills in where each device sits (Pool.Place) when the choice of
// some request item depends on it (alloc.NeedsPlace): once per ADD, and
// never for a single device without a NUMA request.
func (p Pool) placed(devs []Device) []Device {
	needs := func(it abnf.Item) bool { return alloc.NeedsPlace(p.request(it.Amount)) }
	if p.Place == nil || !slices.ContainsFunc(p.Call.Request.Items, needs) {
		return devs
	}
	for i := range devs {
		devs[i].NUMA, devs[i].PCIe = p.Place(devs[i])
		devs[i].placed = true
	}
	return devs
}

// request is the choice of n devices under the call's NUMA request.
func (p Pool) request(n int) alloc.Request {
	return alloc.Request{N: n, Locality: p.Call.Locality, Strict: p.Strict}
}

// choose picks n of the candidates, reading the NUMA distance matrix only
// when the choice falls back beyond the requested nodes.
func (p Pool) choose(cands []alloc.Candidate, n int, dist func() alloc.Distances) ([]int, error) {
	req := p.request(n)
	if alloc.NeedsDistances(cands, req) {
		req.Distances = dist()
	}
	return alloc.Choose(cands, req)
}

// distances reads the host's NUMA distance matrix at most once. A
// malformed matrix is warned about and left out: the choice is then made as
// on a host without one.
func (p Pool) distances() func() alloc.Distances {
	return sync.OnceValue(func() alloc.Distances {
		d, err := sysfs.NewHost(p.Call.Env.HostRoot).NUMADistances()
		if err != nil {
			p.Call.Warnf("reading NUMA distances: %v; choosing as without them", err)
		}
		return d
	})
}

// numa returns the NUMA node of a chosen device, reading its place when
// the choice did not need it.
func (p Pool) numa(d Device) int {
	if d.placed || p.Place == nil {
		return d.NUMA
	}
	n, _ := p.Place(d)
	return n
}
