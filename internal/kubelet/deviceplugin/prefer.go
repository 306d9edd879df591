package deviceplugin

import (
	"slices"

	"github.com/cdi-exec/plugins/internal/alloc"
)

// Prefer chooses size devices out of available for the kubelet: every
// device of must, then the rest by the plugins' own rules (internal/alloc): as
// close as possible to the NUMA nodes of must (or, without must, on the
// fewest NUMA nodes), then closest in the PCIe tree, then in the plugin's
// preference order. The NUMA distance matrix is not known here, so a
// fallback beyond the nodes of must takes the fewest further nodes. Devices that
// no request-id holds come first; devices still held by an allocation
// waiting for garbage collection are taken only when the free ones do not
// suffice. When available cannot fill size, Prefer returns what there is
// and leaves the final word to the kubelet.
func Prefer(devs []Device, available, must []string, size int) []string {
	rank := make(map[string]int, len(devs))
	for i, d := range devs {
		rank[d.ID] = i
	}
	// lookup returns a device and its rank; unknown ids rank last.
	lookup := func(id string) (Device, int) {
		if i, ok := rank[id]; ok {
			return devs[i], i
		}
		return Device{ID: id, NUMA: alloc.Unknown}, len(devs)
	}
	var locality []int
	for _, id := range must {
		if d, _ := lookup(id); d.NUMA >= 0 && !slices.Contains(locality, d.NUMA) {
			locality = append(locality, d.NUMA)
		}
	}
	var free, held []string
	for _, id := range available {
		switch d, _ := lookup(id); {
		case slices.Contains(must, id), slices.Contains(free, id), slices.Contains(held, id):
		case d.Free:
			free = append(free, id)
		default:
			held = append(held, id)
		}
	}
	n := min(size-len(must), len(free)+len(held))
	pool := free
	if len(free) < n {
		pool = append(free, held...)
	}
	out := slices.Clone(must)
	if n <= 0 {
		return out
	}
	cands := make([]alloc.Candidate, len(pool))
	for i, id := range pool {
		d, r := lookup(id)
		cands[i] = alloc.Candidate{Index: r, NUMA: d.NUMA, PCIe: d.PCIe}
	}
	pos, _ := alloc.Choose(cands, alloc.Request{N: n, Locality: locality}) // n fits: no error
	for _, p := range pos {
		out = append(out, pool[p])
	}
	return out
}
