// Package alloc chooses which free devices satisfy a request. It is pure: no
// I/O, the same input always gives the same answer. Where devices sit (NUMA
// node, place in the PCIe tree) and how far NUMA nodes are from each other
// come in as data.
//
// The rules (docs/protocol.md#choice-rules). Without a NUMA request: span the
// fewest NUMA nodes, then keep the devices closest to each other by PCIe
// link class (PIX, PXB, PHB, NODE, SYS: see closest), then take the lowest
// device indices. With a request: take devices on
// the listed nodes first; when they are not enough and the policy is not
// strict, fill from the nodes nearest to the listed ones by the kernel's
// distance matrix, nearest first; then PCIe closeness; then the lowest
// indices. Without a distance matrix every further node counts as equally
// near. A strict policy refuses what the listed nodes cannot hold alone.
package alloc

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Unknown is the NUMA node of a device whose node the kernel does not know
// (sysfs numa_node reads -1).
const Unknown = -1

// Candidate is a free device that may be chosen.
type Candidate struct {
	Index int // orders devices; lower is preferred (card index, tty number)
	NUMA  int // NUMA node, or Unknown
	// PCIe places the device in the PCIe tree: its root complex as the
	// kernel names it ("pci0000:00"), then the PCI functions from the root
	// port down to the device's own function, or to the one it hangs off
	// (a tty on a USB controller). Nil when unknown.
	PCIe []string
}

// Distances is the kernel's NUMA distance matrix: Distances[from][to], 10
// for a node to itself. Nil when the host has none.
type Distances map[int]map[int]int

// Request is what to choose.
type Request struct {
	N        int   // how many devices
	Locality []int // requested NUMA nodes; nil for none
	Strict   bool  // the listed nodes must hold all N
	// Distances orders the further nodes of a locality fallback. Only
	// that fallback reads it (see NeedsDistances).
	Distances Distances
}

// Errors returned by Choose, wrapped with counts.
var (
	ErrInsufficient = errors.New("not enough free devices")
	ErrLocality     = errors.New("not enough free devices on the requested NUMA nodes")
)

// NeedsPlace reports whether the choice depends on where devices sit
// (NUMA node, PCIe path): for more than one device or a NUMA request. A
// single device without one is simply the lowest index.
func NeedsPlace(r Request) bool { return r.N > 1 || r.Locality != nil }

// NeedsDistances reports whether Choose will read r.Distances: a NUMA
// request the listed nodes cannot hold and a policy that allows a
// fallback. cands must carry their NUMA nodes.
func NeedsDistances(cands []Candidate, r Request) bool {
	if r.Locality == nil || r.Strict || r.N > len(cands) {
		return false
	}
	near := 0
	for _, c := range cands {
		if isListed(c.NUMA, r.Locality) {
			near++
		}
	}
	return near < r.N
}

func isListed(node int, locality []int) bool {
	return node != Unknown && slices.Contains(locality, node)
}

// Choose returns the positions in cands of r.N chosen devices, in
// ascending device index.
func Choose(cands []Candidate, r Request) ([]int, error) {
	if r.N > len(cands) {
		return nil, fmt.Errorf("%w: want %d, %d free", ErrInsufficient, r.N, len(cands))
	}
	c := newChooser(cands)
	if r.Locality == nil {
		return c.positions(c.pack(c.all(), r.N, nil)), nil
	}
	var near, far []int32
	for _, rk := range c.all() {
		if isListed(c.at(rk).NUMA, r.Locality) {
			near = append(near, rk)
		} else {
			far = append(far, rk)
		}
	}
	if len(near) >= r.N {
		return c.positions(c.pack(near, r.N, nil)), nil
	}
	if r.Strict {
		return nil, fmt.Errorf("%w: want %d, %d free on nodes %v", ErrLocality, r.N, len(near), r.Locality)
	}
	chosen := near
	for _, tier := range c.tiers(far, r) {
		need := r.N - len(chosen)
		if need == 0 {
			break
		}
		if len(tier) <= need {
			chosen = append(chosen, tier...)
			continue
		}
		chosen = append(chosen, c.pack(tier, need, chosen)...)
	}
	return c.positions(chosen), nil
}

// tiers splits the devices off the listed nodes into groups equally far
// from the listed nodes, nearest first: a node's distance is the sum of the
// distances from each listed node the matrix knows. Devices whose node the
// matrix lacks (or Unknown) come last. Without a matrix that knows a listed
// node, all are one tier.
func (c *chooser) tiers(far []int32, r Request) [][]int32 {
	var from []int
	for _, n := range r.Locality {
		if _, ok := r.Distances[n]; ok && !slices.Contains(from, n) {
			from = append(from, n)
		}
	}
	if len(from) == 0 {
		return [][]int32{far}
	}
	dist := map[int]int{}
	for _, rk := range far {
		node := c.at(rk).NUMA
		if _, ok := dist[node]; !ok {
			dist[node] = distance(r.Distances, from, node)
		}
	}
	sorted := slices.Clone(far)
	slices.SortStableFunc(sorted, func(a, b int32) int {
		return cmpInt(dist[c.at(a).NUMA], dist[c.at(b).NUMA])
	})
	var out [][]int32
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && dist[c.at(sorted[j]).NUMA] == dist[c.at(sorted[i]).NUMA] {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}

// distance sums the distances from each node in from to node; MaxInt when
// any is unknown.
func distance(d Distances, from []int, node int) int {
	if node == Unknown {
		return math.MaxInt
	}
	sum := 0
	for _, f := range from {
		v, ok := d[f][node]
		if !ok {
			return math.MaxInt
		}
		sum += v
	}
	return sum
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
