package main

import (
	"reflect"
	"testing"
)

// The kernel's rules for sriov_numvfs (drivers/pci/iov.c): the same value is
// a no-op, more than sriov_totalvfs is ERANGE, one non-zero count to
// another is EBUSY; plan must never produce a write the kernel refuses, and
// never touch a PF whose VFs are allocated.
func TestPlan(t *testing.T) {
	tests := []struct {
		name                 string
		current, total, want int
		busy                 bool
		writes               []int
	}{
		{"fresh PF", 0, 8, 4, false, []int{4}},
		{"already right", 4, 8, 4, false, nil},
		{"capped at totalvfs (ERANGE)", 0, 8, 16, false, []int{8}},
		{"capped and already right", 8, 8, 16, false, nil},
		{"non-zero to non-zero goes through 0 (EBUSY)", 4, 8, 2, false, []int{0, 2}},
		{"growing goes through 0 too", 2, 8, 6, false, []int{0, 6}},
		{"busy PF is left alone", 4, 8, 2, true, nil},
		{"busy PF with the right count", 4, 8, 4, true, nil},
	}
	for _, tt := range tests {
		got, err := plan(tt.current, tt.total, tt.want, tt.busy)
		if err != nil || !reflect.DeepEqual(got, tt.writes) {
			t.Errorf("%s: plan = %v, %v; want %v", tt.name, got, err, tt.writes)
		}
		// Replay the writes against the kernel's rules.
		cur := tt.current
		for _, w := range got {
			if w > tt.total {
				t.Errorf("%s: write %d > totalvfs %d would be ERANGE", tt.name, w, tt.total)
			}
			if cur != 0 && w != 0 && w != cur {
				t.Errorf("%s: write %d with %d VFs would be EBUSY", tt.name, w, cur)
			}
			cur = w
		}
	}
}
