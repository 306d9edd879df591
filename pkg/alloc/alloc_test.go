package alloc

import (
	"errors"
	"reflect"
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

// indices maps chosen positions back to device indices.
func indices(c []Candidate, pos []int) []int {
	out := []int{}
	for _, p := range pos {
		out = append(out, c[p].Index)
	}
	return out
}

func TestChoose(t *testing.T) {
	twoNodes := host(0, 0, 0, 0, 1, 1, 1, 1)
	tests := []struct {
		name     string
		cands    []Candidate
		n        int
		locality []int
		strict   bool
		want     []int
		err      error
	}{
		{"lowest index on one node", twoNodes, 2, nil, false, []int{0, 1}, nil},
		{"unknown numa is one group", host(-1, -1, -1), 3, nil, false, []int{0, 1, 2}, nil},
		{"pack onto the node that holds all", host(0, 1, 1, 1, 0), 3, nil, false, []int{1, 2, 3}, nil},
		{"pack prefers lowest among fitting nodes", host(1, 0, 1, 0), 2, nil, false, []int{0, 2}, nil},
		{"span fewest nodes", host(0, 1, 1, 2, 2, 2), 5, nil, false, []int{1, 2, 3, 4, 5}, nil},
		{"locality honoured", twoNodes, 2, []int{1}, false, []int{4, 5}, nil},
		{"locality any listed node", twoNodes, 3, []int{3, 1}, false, []int{4, 5, 6}, nil},
		{"locality falls back", twoNodes, 6, []int{1}, false, []int{0, 1, 4, 5, 6, 7}, nil},
		{"locality unknown node falls back", twoNodes, 1, []int{7}, false, []int{0}, nil},
		{"strict refuses", twoNodes, 5, []int{1}, true, nil, ErrLocality},
		{"strict satisfied", twoNodes, 4, []int{0}, true, []int{0, 1, 2, 3}, nil},
		{"unknown node never local", host(-1, 0), 1, []int{0}, true, []int{1}, nil},
		{"insufficient", twoNodes, 9, nil, false, nil, ErrInsufficient},
		{"insufficient before strict", twoNodes, 9, []int{0}, true, nil, ErrInsufficient},
		{"all", twoNodes, 8, nil, false, []int{0, 1, 2, 3, 4, 5, 6, 7}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pos, err := Choose(tt.cands, tt.n, tt.locality, tt.strict)
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

// Many NUMA nodes take the greedy path and still return n distinct devices.
func TestChooseManyNodes(t *testing.T) {
	var nodes []int
	for i := range 256 {
		nodes = append(nodes, i%64)
	}
	c := host(nodes...)
	pos, err := Choose(c, 100, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range pos {
		if seen[p] {
			t.Fatalf("position %d chosen twice", p)
		}
		seen[p] = true
	}
	if len(pos) != 100 {
		t.Fatalf("chose %d", len(pos))
	}
}

func BenchmarkChoose64(b *testing.B) {
	var nodes []int
	for i := range 64 {
		nodes = append(nodes, i/16)
	}
	c := host(nodes...)
	for b.Loop() {
		if _, err := Choose(c, 4, []int{2}, false); err != nil {
			b.Fatal(err)
		}
	}
}
