package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// host builds candidates with index i on the given node.
func host(nodes ...int) []Candidate {
	c := make([]Candidate, len(nodes))
	for i, n := range nodes {
		c[i] = Candidate{Index: i, NUMA: n}
	}
	return c
}

// dev is a candidate on a node with a PCIe path written "pci0000:00/a/b".
func dev(index, numa int, path string) Candidate {
	c := Candidate{Index: index, NUMA: numa}
	if path != "" {
		c.PCIe = strings.Split(path, "/")
	}
	return c
}

// indices maps chosen positions back to device indices.
func indices(c []Candidate, pos []int) []int {
	out := []int{}
	for _, p := range pos {
		out = append(out, c[p].Index)
	}
	return out
}

// ring is an asymmetric 4-node matrix: from node i, node i+1 is 16 away,
// i+2 22 and i+3 28 (mod 4).
var ring = Distances{
	0: {0: 10, 1: 16, 2: 22, 3: 28},
	1: {0: 28, 1: 10, 2: 16, 3: 22},
	2: {0: 22, 1: 28, 2: 10, 3: 16},
	3: {0: 16, 1: 22, 2: 28, 3: 10},
}

// switches is one NUMA node (0) with a PCIe switch: indices 0 and 2 under
// one downstream port, 1 and 3 under the other.
var switches = []Candidate{
	dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"),
	dev(1, 0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"),
	dev(2, 0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:01.0"),
	dev(3, 0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:01.0"),
}

// server is one NUMA node, by link class: index 0 on the root bus (a BMC's
// VGA), 1 behind root port 00:01.0, 2 and 3 on two downstream ports of one
// switch below root port 00:03.0.
var server = []Candidate{
	dev(0, 0, "pci0000:00/0000:00:02.0"),
	dev(1, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
	dev(2, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:00.0/0000:04:00.0"),
	dev(3, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:01.0/0000:05:00.0"),
}

func TestChoose(t *testing.T) {
	twoNodes := host(0, 0, 0, 0, 1, 1, 1, 1)
	tests := []struct {
		name  string
		cands []Candidate
		req   Request
		want  []int
		err   error
	}{
		// Fewest NUMA nodes, then lowest indices (docs/protocol.md#choice-rules).
		{"lowest index on one node", twoNodes, Request{N: 2}, []int{0, 1}, nil},
		{"unknown numa is one group", host(-1, -1, -1), Request{N: 3}, []int{0, 1, 2}, nil},
		{"pack onto the node that holds all", host(0, 1, 1, 1, 0), Request{N: 3}, []int{1, 2, 3}, nil},
		{"pack prefers lowest among fitting nodes", host(1, 0, 1, 0), Request{N: 2}, []int{0, 2}, nil},
		{"span fewest nodes", host(0, 1, 1, 2, 2, 2), Request{N: 5}, []int{1, 2, 3, 4, 5}, nil},
		{"insufficient", twoNodes, Request{N: 9}, nil, ErrInsufficient},
		{"all", twoNodes, Request{N: 8}, []int{0, 1, 2, 3, 4, 5, 6, 7}, nil},

		// PCIe closeness after the node count.
		{"two under one switch (PIX), not the lowest pair", server, Request{N: 2}, []int{2, 3}, nil},
		{"one port or two of one switch are both PIX: lowest indices", switches, Request{N: 2}, []int{0, 1}, nil},
		{"root bus and root ports are all PHB: lowest indices, not fewest hops", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 0, "pci0000:00/0000:00:03.0/0000:02:00.0"),
			dev(2, 0, "pci0000:00/0000:00:02.0"),
		}, Request{N: 2}, []int{0, 1}, nil},
		{"PXB (two switches below one root port) before PHB", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:00.0/0000:04:00.0"),
			dev(2, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:01.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"),
		}, Request{N: 2}, []int{1, 2}, nil},
		{"PIX before PXB", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:00.0/0000:04:00.0"),
			dev(1, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:01.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"),
			dev(2, 0, "pci0000:00/0000:00:03.0/0000:02:00.0/0000:03:01.0/0000:05:00.0/0000:06:01.0/0000:08:00.0"),
		}, Request{N: 2}, []int{1, 2}, nil},
		{"sum over pairs: one and three cross fewer SYS pairs than two and two", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 0, "pci0000:40/0000:40:01.0/0000:41:00.0"),
			dev(2, 1, "pci0000:80/0000:80:01.0/0000:81:00.0"),
			dev(3, 1, "pci0000:c0/0000:c0:01.0/0000:c1:00.0"),
			dev(4, 1, "pci0000:c0/0000:c0:03.0/0000:c2:00.0"),
		}, Request{N: 4}, []int{0, 2, 3, 4}, nil},
		{"NODE (two root complexes of one node) before SYS", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 1, "pci0000:80/0000:80:01.0/0000:81:00.0"),
			dev(2, 0, "pci0000:40/0000:40:01.0/0000:41:00.0"),
		}, Request{N: 2, Locality: []int{0, 1}}, []int{0, 2}, nil},
		{"one device ignores PCIe", switches, Request{N: 1}, []int{0}, nil},
		{"three: a whole port and one more", switches, Request{N: 3}, []int{0, 1, 2}, nil},
		{"fewest nodes before PCIe", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 1, "pci0000:00/0000:00:01.0/0000:01:00.1"),
			dev(2, 1, "pci0000:80/0000:80:01.0/0000:81:00.0"),
		}, Request{N: 2}, []int{1, 2}, nil},
		{"different root complexes are farther than any shared root", []Candidate{
			dev(0, 0, "pci0000:40/0000:40:01.0"),
			dev(1, 0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"),
			dev(2, 0, "pci0000:00/0000:00:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"),
		}, Request{N: 2}, []int{1, 2}, nil},
		{"unknown place is farthest", []Candidate{
			dev(0, 0, ""),
			dev(1, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(2, 0, "pci0000:00/0000:00:02.0/0000:02:00.0"),
		}, Request{N: 2}, []int{1, 2}, nil},
		{"same PCI function is closest", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:14.0"),
			dev(1, 0, "pci0000:00/0000:00:15.0"),
			dev(2, 0, "pci0000:00/0000:00:14.0"),
		}, Request{N: 2}, []int{0, 2}, nil},
		{"equal closeness: lowest indices", []Candidate{
			dev(0, 0, "pci0000:00/0000:00:01.0/0000:01:00.0"),
			dev(1, 0, "pci0000:00/0000:00:02.0/0000:02:00.0"),
			dev(2, 0, "pci0000:00/0000:00:02.0/0000:02:00.1"),
			dev(3, 0, "pci0000:00/0000:00:01.0/0000:01:00.1"),
		}, Request{N: 2}, []int{0, 3}, nil},
		{"no PCIe anywhere: lowest indices", host(0, 0, 0), Request{N: 2}, []int{0, 1}, nil},

		// Locality: listed nodes first.
		{"locality honoured", twoNodes, Request{N: 2, Locality: []int{1}}, []int{4, 5}, nil},
		{"locality any listed node", twoNodes, Request{N: 3, Locality: []int{3, 1}}, []int{4, 5, 6}, nil},
		{"locality then PCIe", append(slices.Clone(server), dev(9, 1, "")), Request{N: 2, Locality: []int{0}}, []int{2, 3}, nil},
		{"strict refuses", twoNodes, Request{N: 5, Locality: []int{1}, Strict: true}, nil, ErrLocality},
		{"strict refuses even with distances", twoNodes, Request{N: 5, Locality: []int{1}, Strict: true, Distances: ring}, nil, ErrLocality},
		{"strict satisfied", twoNodes, Request{N: 4, Locality: []int{0}, Strict: true}, []int{0, 1, 2, 3}, nil},
		{"unknown node never local", host(-1, 0), Request{N: 1, Locality: []int{0}, Strict: true}, []int{1}, nil},
		{"insufficient before strict", twoNodes, Request{N: 9, Locality: []int{0}, Strict: true}, nil, ErrInsufficient},

		// Locality fallback without a matrix: fewest further nodes, as before.
		{"locality falls back", twoNodes, Request{N: 6, Locality: []int{1}}, []int{0, 1, 4, 5, 6, 7}, nil},
		{"locality unknown node falls back", twoNodes, Request{N: 1, Locality: []int{7}}, []int{0}, nil},
		{"no matrix: fewest further nodes", host(0, 2, 3, 3), Request{N: 3, Locality: []int{1, 0}}, []int{0, 2, 3}, nil},
		{"matrix without the listed node: as without one", host(0, 3, 3, 2), Request{N: 2, Locality: []int{7}, Distances: ring}, []int{1, 2}, nil},

		// Locality fallback by the distance matrix: nearest first, by the
		// listed node's own row (from it to the others).
		{"nearest node, not the lowest-numbered", host(0, 0, 2, 2, 1), Request{N: 3, Locality: []int{1}, Distances: ring}, []int{2, 3, 4}, nil},
		{"distance from the listed node, not to it", host(0, 3), Request{N: 1, Locality: []int{1}, Distances: ring}, []int{1}, nil},
		{"nearest first, then the next", host(0, 0, 2, 3, 3), Request{N: 4, Locality: []int{1}, Distances: ring}, []int{0, 2, 3, 4}, nil},
		{"several listed nodes: smallest sum", host(0, 3, 2, 1), Request{N: 3, Locality: []int{0, 3}, Distances: ring}, []int{0, 1, 3}, nil},
		{"unknown node comes last", host(-1, 0, 3), Request{N: 2, Locality: []int{2}, Distances: ring}, []int{1, 2}, nil},
		{"equally near nodes: fewest of them", host(2, 3, 3, 0), Request{N: 3, Locality: []int{0}, Distances: Distances{
			0: {0: 10, 1: 20, 2: 20, 3: 20}, 1: {0: 20, 1: 10, 2: 20, 3: 20}, 2: {0: 20, 1: 20, 2: 10, 3: 20}, 3: {0: 20, 1: 20, 2: 20, 3: 10},
		}}, []int{1, 2, 3}, nil},
		{"fill the closest set from the nearest node", []Candidate{
			dev(0, 1, "pci0000:80/0000:80:01.0/0000:81:00.0"),
			dev(1, 1, "pci0000:80/0000:80:02.0/0000:82:00.0"),
			dev(2, 1, "pci0000:80/0000:80:02.0/0000:82:00.1"),
			dev(3, 0, "pci0000:00/0000:00:01.0/0000:01:00.1"),
		}, Request{N: 3, Locality: []int{0}, Distances: Distances{0: {0: 10, 1: 20}, 1: {0: 20, 1: 10}}}, []int{1, 2, 3}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pos, err := Choose(tt.cands, tt.req)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := indices(tt.cands, pos); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("chose %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNeeds(t *testing.T) {
	twoNodes := host(0, 0, 1, 1)
	tests := []struct {
		name            string
		req             Request
		place, distance bool
	}{
		{"one device", Request{N: 1}, false, false},
		{"two devices", Request{N: 2}, true, false},
		{"one local device", Request{N: 1, Locality: []int{1}}, true, false},
		{"listed nodes hold it", Request{N: 2, Locality: []int{1}}, true, false},
		{"fallback", Request{N: 3, Locality: []int{1}}, true, true},
		{"strict never falls back", Request{N: 3, Locality: []int{1}, Strict: true}, true, false},
		{"insufficient anyway", Request{N: 5, Locality: []int{1}}, true, false},
	}
	for _, tt := range tests {
		if got := NeedsPlace(tt.req); got != tt.place {
			t.Errorf("%s: NeedsPlace = %v", tt.name, got)
		}
		if got := NeedsDistances(twoNodes, tt.req); got != tt.distance {
			t.Errorf("%s: NeedsDistances = %v", tt.name, got)
		}
	}
}

// Discovery order does not matter: candidates are ranked by index.
func TestChooseUnsorted(t *testing.T) {
	c := []Candidate{server[3], server[1], server[2], server[0]}
	pos, err := Choose(c, Request{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := indices(c, pos); !reflect.DeepEqual(got, []int{2, 3}) {
		t.Fatalf("chose %v", got)
	}
}

// Many NUMA nodes take the greedy path and still return n distinct devices.
func TestChooseManyNodes(t *testing.T) {
	var nodes []int
	for i := range 256 {
		nodes = append(nodes, i%64)
	}
	c := host(nodes...)
	pos, err := Choose(c, Request{N: 100})
	if err != nil {
		t.Fatal(err)
	}
	distinct(t, pos, 100)
}

func distinct(t *testing.T, pos []int, n int) {
	t.Helper()
	seen := map[int]bool{}
	for _, p := range pos {
		if seen[p] {
			t.Fatalf("position %d chosen twice", p)
		}
		seen[p] = true
	}
	if len(pos) != n {
		t.Fatalf("chose %d, want %d", len(pos), n)
	}
}

// linkClass is the rule as docs/protocol.md states it, written apart
// from the tree search: SYS (5) across NUMA nodes; NODE (4) across root
// complexes, or for a device of unknown place; PHB (3) across root ports
// (a function on the root bus counting as its own); PIX (1) when the
// function two links above each is the same one (a switch's upstream port
// above two of its downstream ports; the root port for devices on its own
// link); else PXB (2). Two devices on one function are 0.
func linkClass(a, b Candidate) int {
	group := func(p []string) string { return p[max(1, len(p)-3)] }
	switch {
	case a.NUMA != b.NUMA:
		return 5
	case len(a.PCIe) < 2 || len(b.PCIe) < 2 || a.PCIe[0] != b.PCIe[0]:
		return 4
	case slices.Equal(a.PCIe, b.PCIe):
		return 0
	case a.PCIe[1] != b.PCIe[1]:
		return 3
	case group(a.PCIe) == group(b.PCIe):
		return 1
	}
	return 2
}

// bruteForce finds the best set of n by trying every subset on one NUMA
// node: smallest sum of pairwise link classes, then lowest indices.
func bruteForce(c []Candidate, n int) []int {
	var best []int
	bestCost := -1
	combinations(len(c), n, func(set []int) {
		cost := 0
		for i := range set {
			for j := i + 1; j < len(set); j++ {
				cost += linkClass(c[set[i]], c[set[j]])
			}
		}
		if bestCost < 0 || cost < bestCost {
			best, bestCost = slices.Clone(set), cost
		}
	})
	return best
}

// randomTree returns m devices on one node, at random places in a small
// PCIe forest, some of unknown place, some sharing a function. A
// function's name spells its path, as PCI addresses are unique on a host.
func randomTree(r *rand.Rand, m int) []Candidate {
	var c []Candidate
	for i := range m {
		if r.IntN(8) == 0 {
			c = append(c, dev(i, 0, ""))
			continue
		}
		path := []string{fmt.Sprintf("pci0000:%02x", r.IntN(2))}
		for depth := 1 + r.IntN(4); len(path) <= depth; {
			path = append(path, fmt.Sprintf("%s.%d", path[len(path)-1], r.IntN(3)))
		}
		c = append(c, Candidate{Index: i, NUMA: 0, PCIe: path})
	}
	return c
}

// The tree search finds exactly what trying every subset finds.
func TestClosestMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 400 {
		m := 2 + r.IntN(9)
		c := randomTree(r, m)
		n := 1 + r.IntN(m)
		pos, err := Choose(c, Request{N: n})
		if err != nil {
			t.Fatal(err)
		}
		if want := bruteForce(c, n); !reflect.DeepEqual(pos, want) {
			t.Fatalf("round %d: n=%d of %v: chose %v, brute force %v", round, n, c, pos, want)
		}
	}
}

// bigHost is 1024 devices on 8 NUMA nodes: per node one root complex, 4
// root ports with a switch each, 8 downstream ports per switch, 4 functions
// per port.
func bigHost() []Candidate {
	var c []Candidate
	for i := range 1024 {
		node, rp, dsp, fn := i/128, i/32%4, i/4%8, i%4
		path := fmt.Sprintf("pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0/0000:%02x:%02x.0/0000:%02x:00.%d",
			node*32, node*32, rp+1, node*32+rp*8+1, node*32+rp*8+2, dsp, node*32+rp*8+3+dsp, fn)
		c = append(c, dev(i, node, path))
	}
	return c
}

// On a big host, a request lands under one switch (PIX) rather than take
// the lowest free devices across two.
func TestChooseBigHost(t *testing.T) {
	c := bigHost()
	free := c[30:] // devices 0-29 are held: switch 0 has two free
	for _, tt := range []struct {
		n     int
		first int
	}{{2, 30}, {4, 32}, {8, 32}, {16, 32}, {32, 32}} {
		pos, err := Choose(free, Request{N: tt.n})
		if err != nil {
			t.Fatal(err)
		}
		got := indices(free, pos)
		if got[0] != tt.first || got[len(got)-1] != tt.first+tt.n-1 {
			t.Errorf("n=%d: chose %v, want %d..%d", tt.n, got, tt.first, tt.first+tt.n-1)
		}
	}
}

// A search past the budget is made without PCIe closeness: fewest nodes,
// then lowest indices, the same every time.
func TestChooseBudget(t *testing.T) {
	var c []Candidate
	for i := range 1024 { // every device on its own deep branch: nothing bundles
		c = append(c, dev(i, i%2, fmt.Sprintf("pci0000:00/a%d/b%d/c%d/d%d", i%7, i%11, i%13, i)))
	}
	var want []int
	for i := 0; len(want) < 300; i += 2 {
		want = append(want, i)
	}
	ch := newChooser(c)
	ch.pack(ch.all(), 300, nil)
	if !ch.spent {
		t.Fatal("the search stayed within its budget; the test needs a bigger one")
	}
	for range 2 {
		pos, err := Choose(c, Request{N: 300})
		if err != nil {
			t.Fatal(err)
		}
		if got := indices(c, pos); !reflect.DeepEqual(got, want) {
			t.Fatalf("chose %v", got)
		}
	}
}

func BenchmarkChoose64(b *testing.B) {
	var nodes []int
	for i := range 64 {
		nodes = append(nodes, i/16)
	}
	c := host(nodes...)
	for b.Loop() {
		if _, err := Choose(c, Request{N: 4, Locality: []int{2}}); err != nil {
			b.Fatal(err)
		}
	}
}

// vfHost is 1024 SR-IOV VFs on 8 NUMA nodes: per node one root complex
// with two root ports, a PF under each with 64 VFs beside it.
func vfHost() []Candidate {
	var c []Candidate
	for i := range 1024 {
		node, pf, vf := i/128, i/64%2, i%64
		path := fmt.Sprintf("pci0000:%02x/0000:%02x:%02x.0/0000:%02x:%02x.%d",
			node*32, node*32, pf+1, node*32+pf+1, vf/8, vf%8)
		c = append(c, dev(i, node, path))
	}
	return c
}

// flatHost is 1024 devices on 8 NUMA nodes without PCIe places (virtual
// consoles, or a host whose paths are unknown).
func flatHost() []Candidate {
	var nodes []int
	for i := range 1024 {
		nodes = append(nodes, i/128)
	}
	return host(nodes...)
}

// BenchmarkChoose1024 chooses among 1024 devices on 8 NUMA nodes, held
// device 0 aside, for hosts of three shapes: every device on its own PCI
// function below switches (the most tree to search), VFs beside their PFs,
// and no PCIe places at all. Every case must stay well under a
// millisecond, the budget's fallback included.
func BenchmarkChoose1024(b *testing.B) {
	ring8 := Distances{}
	for i := range 8 {
		ring8[i] = map[int]int{}
		for j := range 8 {
			ring8[i][j] = 10 + 6*((j-i+8)%8)
		}
	}
	hosts := []struct {
		name  string
		cands []Candidate
	}{{"switches", bigHost()[1:]}, {"vfs", vfHost()[1:]}, {"flat", flatHost()[1:]}}
	reqs := []struct {
		name string
		req  Request
	}{
		{"1", Request{N: 1}},
		{"2", Request{N: 2}},
		{"8", Request{N: 8}},
		{"16", Request{N: 16}},
		{"64", Request{N: 64}},
		{"300 over 3 nodes", Request{N: 300}},
		{"8 local", Request{N: 8, Locality: []int{3}}},
		{"200 local, nearest fallback", Request{N: 200, Locality: []int{3}, Distances: ring8}},
	}
	for _, h := range hosts {
		for _, r := range reqs {
			b.Run(h.name+"/"+r.name, func(b *testing.B) {
				start := cpuTime()
				for b.Loop() {
					if _, err := Choose(h.cands, r.req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

// cpuTime is the CPU time the process has used, in nanoseconds: on a
// machine shared with other work, time waiting for a CPU inflates ns/op,
// while this counts only the work done (garbage collection included).
func cpuTime() int64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return u.Utime.Nano() + u.Stime.Nano()
}
