package alloc

import (
	"slices"
	"strconv"
)

// budget bounds the PCIe search of one Choose call, in steps: a tree level
// walked, a pair of partial choices compared, a device copied. Within it the
// search is exact; past it the choice is made again without PCIe closeness
// (fewest NUMA nodes, then lowest indices). Realistic requests (a few
// devices of hundreds, or most devices of a few nodes) stay well inside it;
// BenchmarkChoose1024 measures the worst cases against it.
const budget = 1 << 16

// choice is a set of free devices (sorted ranks) and its PCIe cost: the
// sum of the distances between its pairs and from it to the fixed devices.
type choice struct {
	cost  int64
	ranks []int32
}

// better reports whether a is preferred to b: closer, then lower indices.
func (a choice) better(b choice) bool {
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	return slices.Compare(a.ranks, b.ranks) < 0
}

// spend takes n steps from the budget.
func (c *chooser) spend(n int) {
	c.steps -= n
	if c.steps < 0 {
		c.spent = true
	}
}

// closest returns the n devices of union (ranks, in any order) closest in
// the PCIe tree to each other and to fixed, the lowest indices among
// equals; lowest, when the budget runs out.
//
// Closeness is by link class, as nvidia-smi topo ranks pairs: PIX (at most
// one PCIe switch between them), PXB (several bridges below one root
// port), PHB (one root complex: the path crosses its host bridge, whether
// a device sits on the root bus or behind a root port), NODE (two root
// complexes, or a device of unknown place, on one NUMA node) and SYS (two
// NUMA nodes), worth 1 to 5. Two devices on one PCI function (ttys of one
// USB controller) are worth 0. The set with the smallest sum over its
// pairs wins.
//
// The classes are levels of one tree (see pcie), every device five unit
// edges below its root, so a pair's class is half the hops between them.
// On a tree, the sum of pairwise distances is the sum over edges of
// weight × (devices below) × (devices above), so a dynamic program over the
// tree finds the best set of each size in each subtree exactly.
func (c *chooser) closest(union []int32, lowest choice, n int, fixed []int32) choice {
	t := c.pcie()
	s := &search{c: c, t: t, n: n, total: int64(n + len(fixed)), free: len(union)}
	s.mark(union, fixed)
	defer s.unmark()
	res := s.solve(0)
	if c.spent {
		return lowest
	}
	return res.best[n-res.lo]
}

// trie is the PCIe tree of every candidate, built once per Choose, in
// flat arrays: kids and the devices at a node are linked lists.
type trie struct {
	nodes []tnode
	at    []int32 // node of each rank
	next  []int32 // next rank placed at the same node; -1 ends
}

// tnode is a node of the tree: the root above all root complexes, a root
// complex, or a PCI function. Links of -1 lead nowhere.
type tnode struct {
	name                    string // "" for the root and leaves of unknown place
	up                      int64  // weight of the edge to the parent
	parent, head, tail, sib int32  // parent, first and last kid, next sibling
	kids                    int32
	first, last             int32 // devices placed exactly here, ascending
	ordered                 bool  // kids came in rising name order
	// index finds kids by name once they came out of order and are many.
	index map[string]int32
}

// pcie builds the class tree on first use. Below the root, each device
// sits at depth five: its NUMA node, its root complex, its root port (or
// its own function, on the root bus), its PIX group (the function two
// above it: a switch's upstream port for a device on one of the switch's
// downstream ports; the root port for a device on the root port's own
// link) and its own function. A device of unknown place hangs alone below
// its NUMA node by an edge of four. PCI function names are unique on a
// host, so a name identifies one function at whatever level.
func (c *chooser) pcie() *trie {
	if c.tree != nil {
		return c.tree
	}
	t := &trie{nodes: make([]tnode, 0, 2*len(c.cands)+8), at: make([]int32, len(c.cands)), next: make([]int32, len(c.cands))}
	t.add(-1, "", 0)
	for rk := range c.pos {
		cand := c.at(int32(rk))
		path := cand.PCIe
		c.spend(5)
		v := t.child(0, strconv.Itoa(cand.NUMA), 1)
		if len(path) < 2 || path[0] == "" {
			v = t.add(v, "", 4)
		} else {
			k := len(path) - 1
			for _, name := range [...]string{path[0], path[1], path[max(1, k-2)], path[k]} {
				v = t.child(v, name, 1)
			}
		}
		t.at[rk], t.next[rk] = v, -1
		if n := &t.nodes[v]; n.last < 0 {
			n.first, n.last = int32(rk), int32(rk)
		} else {
			t.next[n.last], n.last = int32(rk), int32(rk)
		}
	}
	c.tree = t
	return t
}

// child returns v's kid called name, adding it with edge weight w.
// Discovery lists devices in index order, which mostly follows PCI order:
// siblings arrive together (the last kid matches) and new kids arrive in
// rising name order (a name after the last kid's is new). Only kids out of
// order are looked for: along the list, or in a map once there are many.
func (t *trie) child(v int32, name string, w int64) int32 {
	p := &t.nodes[v]
	if p.tail < 0 {
		return t.add(v, name, w)
	}
	switch last := t.nodes[p.tail].name; {
	case last == name:
		return p.tail
	case p.ordered && name > last:
		return t.add(v, name, w)
	case p.index != nil:
		if k, ok := p.index[name]; ok {
			return k
		}
	default:
		for k := p.head; k >= 0; k = t.nodes[k].sib {
			if t.nodes[k].name == name {
				return k
			}
		}
	}
	return t.add(v, name, w)
}

// add appends a kid to v (the root when v is -1). A kid without a name is
// a leaf of unknown place, never looked up.
func (t *trie) add(v int32, name string, w int64) int32 {
	k := int32(len(t.nodes))
	t.nodes = append(t.nodes, tnode{name: name, up: w, parent: v, head: -1, tail: -1, sib: -1, first: -1, last: -1, ordered: true})
	if v < 0 {
		return k
	}
	p := &t.nodes[v]
	if p.tail < 0 {
		p.head = k
	} else {
		p.ordered = p.ordered && name > t.nodes[p.tail].name
		t.nodes[p.tail].sib = k
	}
	p.tail = k
	p.kids++
	switch {
	case name == "" || p.ordered:
	case p.index != nil:
		p.index[name] = k
	case p.kids > 8:
		p.index = make(map[string]int32, 2*p.kids)
		for k := p.head; k >= 0; k = t.nodes[k].sib {
			if n := t.nodes[k].name; n != "" {
				p.index[n] = k
			}
		}
	}
	return k
}

// search is one closest call over a subset of the tree's devices.
type search struct {
	c     *chooser
	t     *trie
	n     int   // free devices to choose
	total int64 // size of the final set: n plus the fixed devices
	free  int   // free devices in the search
	// Per rank: 1 free, 2 fixed, 0 neither. Per node: the free and fixed
	// devices of its subtree.
	state         []uint8
	nFree, nFixed []int32
}

// mark records which devices take part and counts them up the tree.
func (s *search) mark(union, fixed []int32) {
	s.state = grow(&s.c.state, len(s.c.cands))
	s.nFree = grow(&s.c.nFree, len(s.t.nodes))
	s.nFixed = grow(&s.c.nFixed, len(s.t.nodes))
	count := func(ranks []int32, st uint8, n []int32) {
		for _, rk := range ranks {
			s.state[rk] = st
			for v := s.t.at[rk]; v >= 0; v = s.t.nodes[v].parent {
				n[v]++
				s.c.spend(1)
			}
		}
	}
	count(union, 1, s.nFree)
	count(fixed, 2, s.nFixed)
}

func (s *search) unmark() {
	clear(s.state)
	clear(s.nFree)
	clear(s.nFixed)
}

// grow returns (*buf)[:n], zeroed, reusing its memory.
func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	return (*buf)[:n]
}

// table holds the best choice of each size k, lo <= k <= hi(), within a
// subtree: only the sizes the rest of the search can complete to n.
type table struct {
	lo   int
	best []choice
	free int // free devices in the subtree
}

func (t table) hi() int { return t.lo + len(t.best) - 1 }

// solve returns the table of v's subtree, its edge to the parent excluded.
// Kids that are leaves holding one free device each, on edges of equal
// weight, are interchangeable but for their indices: they are taken as one
// bundle, lowest first, instead of one merge each.
func (s *search) solve(v int32) table {
	var acc table
	var base int64 // cost of kids holding only fixed devices
	if own := s.here(v); len(own) > 0 {
		acc = s.lowest(own, 0)
	}
	var leaves []int32
	var leafUp int64
	for k := s.t.nodes[v].head; k >= 0; k = s.t.nodes[k].sib {
		kid := &s.t.nodes[k]
		free, fixed := s.nFree[k], int64(s.nFixed[k])
		switch {
		case free == 0 && fixed == 0:
		case free == 0:
			sub := s.solve(k)
			base += sub.best[0].cost + kid.up*fixed*(s.total-fixed)
		case free == 1 && fixed == 0 && kid.head < 0 && (leaves == nil || kid.up == leafUp):
			if leaves == nil {
				leaves = s.c.ranks.make(int(s.t.nodes[v].kids))[:0]
			}
			leaves = append(leaves, s.only(k))
			leafUp = kid.up
		default:
			acc = s.merge(acc, s.edge(s.solve(k), kid.up, fixed))
		}
		if s.c.spent {
			return acc
		}
	}
	if len(leaves) > 0 {
		slices.Sort(leaves)
		acc = s.merge(acc, s.lowest(leaves, leafUp*(s.total-1)))
	}
	if acc.best == nil { // fixed devices only
		acc.best = s.c.choices.make(1)
		acc.best[0].cost = base
		return acc
	}
	for i := range acc.best {
		acc.best[i].cost += base
	}
	return acc
}

// only returns the one free device placed at node v.
func (s *search) only(v int32) int32 {
	rk := s.t.nodes[v].first
	for s.state[rk] != 1 {
		rk = s.t.next[rk]
	}
	return rk
}

// here returns the free devices placed at node v, ascending.
func (s *search) here(v int32) []int32 {
	var own []int32
	for rk := s.t.nodes[v].first; rk >= 0; rk = s.t.next[rk] {
		if s.state[rk] == 1 {
			own = append(own, rk)
		}
	}
	return own
}

// lowest is the table of interchangeable devices (sorted ranks), each
// costing each: take the lowest.
func (s *search) lowest(ranks []int32, each int64) table {
	m := len(ranks)
	t := table{lo: max(0, s.n-(s.free-m)), free: m}
	hi := min(m, s.n)
	t.best = s.c.choices.make(hi - t.lo + 1)[:0]
	for k := t.lo; k <= hi; k++ {
		t.best = append(t.best, choice{cost: int64(k) * each, ranks: ranks[:k]})
	}
	s.c.spend(len(t.best))
	return t
}

// edge adds the cost of the edge above a subtree holding fixed fixed
// devices: weight × (devices below) × (devices above).
func (s *search) edge(t table, w, fixed int64) table {
	for i := range t.best {
		below := fixed + int64(t.lo+i)
		t.best[i].cost += w * below * (s.total - below)
	}
	return t
}

// merge combines the tables of two disjoint parts of the tree; an empty
// table (nothing yet) takes the other.
func (s *search) merge(a, b table) table {
	if a.best == nil {
		return b
	}
	out := table{free: a.free + b.free}
	out.lo = max(a.lo+b.lo, s.n-(s.free-out.free))
	aHi, bHi := a.hi(), b.hi()
	hi := min(aHi+bHi, s.n)
	out.best = s.c.choices.make(hi - out.lo + 1)
	for k := out.lo; k <= hi; k++ {
		from, to := max(a.lo, k-bHi), min(aHi, k-b.lo)
		s.c.spend(to - from + 1)
		bi, best := from, a.best[from-a.lo].cost+b.best[k-from-b.lo].cost
		for i := from + 1; i <= to; i++ {
			p, q := a.best[i-a.lo], b.best[k-i-b.lo]
			switch cost := p.cost + q.cost; {
			case cost < best:
				bi, best = i, cost
			case cost == best && s.unionLess(p.ranks, q.ranks, a.best[bi-a.lo].ranks, b.best[k-bi-b.lo].ranks):
				bi = i
			}
		}
		out.best[k-out.lo] = choice{cost: best, ranks: s.union(a.best[bi-a.lo].ranks, b.best[k-bi-b.lo].ranks)}
	}
	return out
}

// unionLess reports whether the sorted union of a1 and b1 has lower ranks
// than that of a2 and b2 (of the same size), without building either.
func (s *search) unionLess(a1, b1, a2, b2 []int32) bool {
	var i1, j1, i2, j2 int
	for k := range len(a1) + len(b1) {
		x := next(a1, b1, &i1, &j1)
		y := next(a2, b2, &i2, &j2)
		if x != y {
			s.c.spend(k)
			return x < y
		}
	}
	s.c.spend(len(a1) + len(b1))
	return false
}

// next takes the lower head of two sorted lists.
func next(a, b []int32, i, j *int) int32 {
	if *j >= len(b) || *i < len(a) && a[*i] < b[*j] {
		*i++
		return a[*i-1]
	}
	*j++
	return b[*j-1]
}

// union merges two disjoint sorted lists; the lists are never changed, so
// an empty side shares the other.
func (s *search) union(a, b []int32) []int32 {
	switch {
	case len(a) == 0:
		return b
	case len(b) == 0:
		return a
	}
	s.c.spend(len(a) + len(b))
	out := s.c.ranks.make(len(a) + len(b))[:0]
	var i, j int
	for range len(a) + len(b) {
		out = append(out, next(a, b, &i, &j))
	}
	return out
}

// arena hands out slices of one large buffer: the search makes many small
// tables, all dropped together when the choice is made. Slices never
// overlap, and a full buffer is left to the ones that use it.
type arena[T any] struct{ buf []T }

func (a *arena[T]) make(n int) []T {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]T, 0, max(n, 1024))
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l+n : l+n]
}
