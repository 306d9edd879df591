// Package alloc chooses which free devices satisfy a request. It is pure: no
// I/O, the same input always gives the same answer.
//
// The rules (docs/protocol.md#choosing-devices): without a NUMA request, span the fewest NUMA
// nodes, then take the lowest device indices. With a request, take devices
// on the listed nodes first, then the fewest further nodes; a strict policy
// refuses what the listed nodes cannot hold alone.
package alloc

import (
	"errors"
	"fmt"
	"slices"
)

// Unknown is the NUMA node of a device whose node the kernel does not know
// (sysfs numa_node reads -1).
const Unknown = -1

// Candidate is a free device that may be chosen.
type Candidate struct {
	Index int // orders devices; lower is preferred (card index, tty number)
	NUMA  int // NUMA node, or Unknown
}

// Errors returned by Choose, wrapped with counts.
var (
	ErrInsufficient = errors.New("not enough free devices")
	ErrLocality     = errors.New("not enough free devices on the requested NUMA nodes")
)

// maxCombinations bounds the exact search over NUMA node groups; beyond it a
// greedy choice (largest groups first) is used. Real hosts have few nodes.
const maxCombinations = 4096

// Choose returns the positions in cands of n chosen devices, in ascending
// device index. locality lists the requested NUMA nodes (nil for none);
// strict makes them mandatory.
func Choose(cands []Candidate, n int, locality []int, strict bool) ([]int, error) {
	if n > len(cands) {
		return nil, fmt.Errorf("%w: want %d, %d free", ErrInsufficient, n, len(cands))
	}
	if locality == nil {
		return pack(cands, all(len(cands)), n), nil
	}
	var near, far []int
	for i, c := range cands {
		if c.NUMA != Unknown && slices.Contains(locality, c.NUMA) {
			near = append(near, i)
		} else {
			far = append(far, i)
		}
	}
	if len(near) >= n {
		return pack(cands, near, n), nil
	}
	if strict {
		return nil, fmt.Errorf("%w: want %d, %d free on nodes %v", ErrLocality, n, len(near), locality)
	}
	chosen := append(near, pack(cands, far, n-len(near))...)
	slices.SortFunc(chosen, func(a, b int) int { return cands[a].Index - cands[b].Index })
	return chosen, nil
}

func all(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// pack chooses n of the positions in pool: the fewest NUMA groups that can
// hold n, and among those the set with the lowest device indices.
func pack(cands []Candidate, pool []int, n int) []int {
	if n == 0 {
		return nil
	}
	// Group by node; each group sorted by index.
	byIndex := func(a, b int) int { return cands[a].Index - cands[b].Index }
	pool = slices.Clone(pool)
	slices.SortFunc(pool, byIndex)
	var groups [][]int
	slot := map[int]int{}
	for _, p := range pool {
		node := cands[p].NUMA
		g, ok := slot[node]
		if !ok {
			g = len(groups)
			slot[node] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], p)
	}
	// Fewest groups: take the largest until n fit.
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

	var best []int
	consider := func(set []int) {
		var union []int
		for _, g := range set {
			union = append(union, groups[g]...)
		}
		if len(union) < n {
			return
		}
		slices.SortFunc(union, byIndex)
		union = union[:n]
		if best == nil || less(cands, union, best) {
			best = union
		}
	}
	if binomial(len(groups), k) <= maxCombinations {
		combinations(len(groups), k, consider)
	} else {
		order := all(len(groups))
		slices.SortStableFunc(order, func(a, b int) int { return len(groups[b]) - len(groups[a]) })
		consider(order[:k])
	}
	return best
}

// less reports whether index set a sorts before b, element by element.
func less(cands []Candidate, a, b []int) bool {
	for i := range a {
		if cands[a[i]].Index != cands[b[i]].Index {
			return cands[a[i]].Index < cands[b[i]].Index
		}
	}
	return false
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
