package alloc

import "slices"

// maxCombinations bounds the exact search over NUMA node groups; beyond it a
// greedy choice (largest groups first) is used. Real hosts have few nodes.
const maxCombinations = 4096

// chooser holds one Choose call's candidates in rank order: rank r is the
// r-th device by index (position breaking ties), so comparing sorted rank
// lists compares device indices.
type chooser struct {
	cands []Candidate
	pos   []int // pos[rank] is the position in cands
	flat  bool  // no device has a known PCIe place: closeness never differs
	steps int   // search budget left (see budget)
	spent bool  // the budget ran out: PCIe closeness is skipped
	tree  *trie // built on first use

	// Scratch space of the searches, reused.
	state         []uint8
	nFree, nFixed []int32
	choices       arena[choice]
	ranks         arena[int32]
}

func newChooser(cands []Candidate) *chooser {
	c := &chooser{cands: cands, pos: make([]int, len(cands)), flat: true, steps: budget}
	sorted := true
	for i := range c.pos {
		c.pos[i] = i
		if i > 0 && cands[i].Index < cands[i-1].Index {
			sorted = false
		}
		if len(cands[i].PCIe) >= 2 {
			c.flat = false
		}
	}
	if !sorted { // discovery usually lists devices in index order already
		slices.SortStableFunc(c.pos, func(a, b int) int { return cmpInt(cands[a].Index, cands[b].Index) })
	}
	return c
}

// at returns the candidate of a rank.
func (c *chooser) at(rk int32) Candidate { return c.cands[c.pos[rk]] }

// all returns every rank.
func (c *chooser) all() []int32 {
	s := make([]int32, len(c.cands))
	for i := range s {
		s[i] = int32(i)
	}
	return s
}

// positions maps ranks back to positions in cands, in ascending index.
func (c *chooser) positions(ranks []int32) []int {
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	out := make([]int, len(ranks))
	for i, rk := range ranks {
		out[i] = c.pos[rk]
	}
	return out
}

// pack chooses n of the ranks in pool: the fewest NUMA groups that can hold
// n; among those the set closest in the PCIe tree, counting its distances
// to fixed (devices already chosen) too; then the lowest indices. If the
// search budget runs out on the way, the choice is made again without
// PCIe closeness, so the answer never depends on where the budget ran out.
func (c *chooser) pack(pool []int32, n int, fixed []int32) []int32 {
	if n == 0 {
		return nil
	}
	if !slices.IsSorted(pool) { // callers pass rank order already
		pool = slices.Clone(pool)
		slices.Sort(pool)
	}
	groups := c.groups(pool)
	k := fewest(groups, n)
	spent := c.spent
	best := c.bestOf(groups, k, n, fixed)
	if c.spent && !spent {
		best = c.bestOf(groups, k, n, fixed)
	}
	return best.ranks
}

// groups splits sorted ranks by NUMA node, in order of first appearance;
// each group stays sorted.
func (c *chooser) groups(pool []int32) [][]int32 {
	var groups [][]int32
	var nodes []int
	for _, rk := range pool {
		node := c.at(rk).NUMA
		g := slices.Index(nodes, node)
		if g < 0 {
			g = len(groups)
			nodes = append(nodes, node)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], rk)
	}
	return groups
}

// fewest returns how many groups, taken largest first, hold n.
func fewest(groups [][]int32, n int) int {
	sizes := make([]int, len(groups))
	for i, g := range groups {
		sizes[i] = len(g)
	}
	slices.SortFunc(sizes, func(a, b int) int { return b - a })
	k, sum := 0, 0
	for sum < n {
		sum += sizes[k]
		k++
	}
	return k
}

// bestOf returns the best choice of n over the k-subsets of groups.
func (c *chooser) bestOf(groups [][]int32, k, n int, fixed []int32) choice {
	if !c.flat && !c.spent && n+len(fixed) >= 2 && c.hopeless(groups, k, n) {
		c.spent = true
	}
	var best choice
	eachSet(groups, k, func(set []int) {
		size := 0
		for _, g := range set {
			size += len(groups[g])
		}
		if size < n {
			return
		}
		ch := choice{ranks: lowestOf(groups, set, n)}
		if !c.flat && !c.spent && n+len(fixed) >= 2 {
			union := make([]int32, 0, size)
			for _, g := range set {
				union = append(union, groups[g]...)
			}
			ch = c.closest(union, ch, n, fixed)
		}
		if best.ranks == nil || ch.better(best) {
			best = ch
		}
	})
	return best
}

// hopeless reports whether the PCIe search of every k-subset would
// clearly exceed the budget, so that it is not begun: a tree search over P
// devices for n of them takes up to P × (min(n, P-n)+1) steps, and it is
// given up on when that sum is eight budgets.
func (c *chooser) hopeless(groups [][]int32, k, n int) bool {
	work := 0
	eachSet(groups, k, func(set []int) {
		p := 0
		for _, g := range set {
			p += len(groups[g])
		}
		if p >= n {
			work += p * (min(n, p-n) + 1)
		}
	})
	return work > 8*budget
}

// eachSet calls fn with the k-subsets of groups to consider: all of them
// while there are at most maxCombinations, else the k largest groups.
func eachSet(groups [][]int32, k int, fn func([]int)) {
	if binomial(len(groups), k) <= maxCombinations {
		combinations(len(groups), k, fn)
		return
	}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(groups[b]) - len(groups[a]) })
	fn(order[:k])
}

// lowestOf merges the sorted groups of set and returns the n lowest ranks.
func lowestOf(groups [][]int32, set []int, n int) []int32 {
	heads := make([]int, len(set))
	out := make([]int32, 0, n)
	for len(out) < n {
		pick := -1
		for i, g := range set {
			if heads[i] < len(groups[g]) && (pick < 0 || groups[g][heads[i]] < groups[set[pick]][heads[pick]]) {
				pick = i
			}
		}
		out = append(out, groups[set[pick]][heads[pick]])
		heads[pick]++
	}
	return out
}

// combinations calls fn with every k-subset of 0..n-1, in lexical order.
func combinations(n, k int, fn func([]int)) {
	set := make([]int, k)
	var rec func(start, depth int)
	rec = func(start, depth int) {
		if depth == k {
			fn(set)
			return
		}
		for i := start; i <= n-(k-depth); i++ {
			set[depth] = i
			rec(i+1, depth+1)
		}
	}
	rec(0, 0)
}

// binomial returns n choose k, saturating above maxCombinations.
func binomial(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxCombinations {
			return maxCombinations + 1
		}
	}
	return r
}
