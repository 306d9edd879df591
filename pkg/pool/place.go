package pool

import (
	"context"
	"slices"
	"sync"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// placed fills in where each device sits (the plugin's Placer) when the choice of
// some request item depends on it (alloc.NeedsPlace): once per ADD, and
// never for a single device without a NUMA request.
func (p Pool) placed(ctx context.Context, c *skel.Call, devs []Device) []Device {
	needs := func(it request.Item) bool {
		return alloc.NeedsPlace(alloc.Request{N: it.Amount, Locality: c.Locality})
	}
	if p.Placer == nil || !slices.ContainsFunc(c.Request.Items, needs) {
		return devs
	}
	for i := range devs {
		devs[i].NUMA, devs[i].PCIe = p.Placer.Place(ctx, c, devs[i])
		devs[i].placed = true
	}
	return devs
}

// numa returns the NUMA node of a chosen device, reading its place when
// the choice did not need it.
func (p Pool) numa(ctx context.Context, c *skel.Call, d Device) int {
	if d.placed || p.Placer == nil {
		return d.NUMA
	}
	n, _ := p.Placer.Place(ctx, c, d)
	return n
}

// distances reads the host's NUMA distance matrix at most once. A
// malformed matrix is warned about and left out: the choice is then made as
// on a host without one.
func distances(c *skel.Call) func() alloc.Distances {
	return sync.OnceValue(func() alloc.Distances {
		d, err := sysfs.NewHost(c.Env.HostRoot).NUMADistances()
		if err != nil {
			c.Warnf("reading NUMA distances: %v; choosing as without them", err)
		}
		return d
	})
}
