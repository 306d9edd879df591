package deviceplugin

import (
	"slices"
	"testing"
)

func TestPrefer(t *testing.T) {
	// a..f in preference order; a, c, e on node 0, b, d, f on node 1;
	// c is held by an allocation waiting for garbage collection.
	devs := []Device{
		{ID: "a", NUMA: 0, Healthy: true, Free: true},
		{ID: "b", NUMA: 1, Healthy: true, Free: true},
		{ID: "c", NUMA: 0, Healthy: true},
		{ID: "d", NUMA: 1, Healthy: true, Free: true},
		{ID: "e", NUMA: 0, Healthy: true, Free: true},
		{ID: "f", NUMA: 1, Healthy: true, Free: true},
	}
	all := []string{"a", "b", "c", "d", "e", "f"}
	tests := []struct {
		name            string
		available, must []string
		size            int
		want            []string
	}{
		{"one node, lowest first, free first", all, nil, 2, []string{"a", "e"}},
		{"node 1 when node 0 has one free", []string{"a", "b", "c", "d"}, nil, 2, []string{"b", "d"}},
		{"a held device only when the free ones do not suffice", []string{"a", "c"}, nil, 2, []string{"a", "c"}},
		{"must-include first, then its node", all, []string{"f"}, 3, []string{"f", "b", "d"}},
		{"must-include in the kubelet's order", all, []string{"e", "b"}, 2, []string{"e", "b"}},
		{"unknown ids come last", []string{"zz", "a"}, nil, 2, []string{"a", "zz"}},
		{"more than available", []string{"b"}, nil, 3, []string{"b"}},
		{"duplicates in available count once", []string{"b", "b"}, nil, 2, []string{"b"}},
		{"size zero", all, nil, 0, []string{}},
	}
	for _, tt := range tests {
		got := Prefer(devs, tt.available, tt.must, tt.size)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Among devices on one NUMA node, two under one PCIe switch are preferred
// to two under different root ports, as the plugins choose.
func TestPreferPCIe(t *testing.T) {
	under := func(port, dev string) []string { return []string{"pci0000:00", port, dev} }
	devs := []Device{
		{ID: "g0", NUMA: 0, Free: true, PCIe: under("0000:00:01.0", "0000:01:00.0")},
		{ID: "g1", NUMA: 0, Free: true, PCIe: under("0000:00:02.0", "0000:02:00.0")},
		{ID: "g2", NUMA: 0, Free: true, PCIe: under("0000:00:02.0", "0000:02:01.0")},
	}
	if got := Prefer(devs, []string{"g0", "g1", "g2"}, nil, 2); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Errorf("got %v, want the pair under one port", got)
	}
}
