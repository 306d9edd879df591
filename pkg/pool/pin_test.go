package pool

import (
	"context"
	"testing"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// TestPinned covers the pool's rules of a pinned ADD
// (docs/protocol.md#extension-pinned-add); skel checks the grammar and the amount.
func TestPinned(t *testing.T) {
	tests := []struct {
		name   string
		numa   []int
		strict bool
		shares int               // the host is one unit kvm of that many shares, not GPUs
		inv    map[string]string // inventory: key → reason it is not usable
		steps  []step
		after  map[string][]string
	}{
		{name: "the named devices, in the order named",
			numa: []int{0, 0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g3", "g1"}, devices: []string{"/dev/g3", "/dev/g1"}, local: []int{0}},
				{id: "b", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g3", "g1"}, "b": {"g0"}}},
		{name: "replay of the same set, in any order, answers as recorded",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g2", "g0"}, devices: []string{"/dev/g2", "/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:2", pinned: []string{"g2", "g0"}, devices: []string{"/dev/g2", "/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g2"}, devices: []string{"/dev/g2", "/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:2", devices: []string{"/dev/g2", "/dev/g0"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g2", "g0"}}},
		{name: "a different set or amount under the same id is 104 and changes nothing",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g1"}, devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0}},
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g2"}, code: protocol.CodeConflict, detail: "g0,g2"},
				{id: "a", request: "gpu:1", pinned: []string{"g0"}, code: protocol.CodeConflict},
			},
			after: map[string][]string{"a": {"g0", "g1"}}},
		{name: "a count-based allocation replays pinned only with its own devices",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:1", pinned: []string{"g0"}, devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "a", request: "gpu:1", pinned: []string{"g1"}, code: protocol.CodeConflict},
			},
			after: map[string][]string{"a": {"g0"}}},
		{name: "a key held by another request is 103 naming the key, all or nothing",
			numa: []int{0, 0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", pinned: []string{"g1"}, devices: []string{"/dev/g1"}, local: []int{0}},
				{id: "b", request: "gpu:2", pinned: []string{"g0", "g1"}, code: protocol.CodeInsufficient, detail: "g1: held by another request"},
			},
			after: map[string][]string{"a": {"g1"}}},
		{name: "an unknown key is 103 naming it",
			numa: []int{0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g9"}, code: protocol.CodeInsufficient, detail: "g9: no such device"},
			},
			after: map[string][]string{}},
		{name: "a filtered or unusable key is 103 with the inventory's reason",
			numa: []int{0, 0},
			inv:  map[string]string{"g5": "vendor not in vendorid_whitelist", "g6": "no /dev node"},
			steps: []step{
				{id: "a", request: "gpu:1", pinned: []string{"g5"}, code: protocol.CodeInsufficient, detail: "g5: vendor not in vendorid_whitelist"},
				{id: "a", request: "gpu:1", pinned: []string{"g6"}, code: protocol.CodeInsufficient, detail: "g6: no /dev node"},
			},
			after: map[string][]string{}},
		{name: "an unplugged key is 103; its holder keeps it",
			numa: []int{0, 0},
			steps: []step{
				{id: "a", request: "gpu:1", pinned: []string{"g0"}, devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "b", request: "gpu:1", pinned: []string{"g1"}, before: func(h *host) { h.unplug("g1") }, code: protocol.CodeInsufficient},
				{id: "a", request: "gpu:1", pinned: []string{"g0"}, before: func(h *host) { h.unplug("g0") }, devices: []string{"/dev/g0"}, local: []int{0}},
			},
			after: map[string][]string{"a": {"g0"}}},
		{name: "locality is reported, not applied",
			numa: []int{0, 1, 1},
			steps: []step{
				{id: "a", request: "gpu:1", pinned: []string{"g0"}, numa: []int{1}, devices: []string{"/dev/g0"}, local: []int{0}},
				{id: "b", request: "gpu:2", pinned: []string{"g2", "g0"}, code: protocol.CodeInsufficient},
				{id: "b", request: "gpu:1", pinned: []string{"g2"}, devices: []string{"/dev/g2"}, local: []int{1}},
			},
			after: map[string][]string{"a": {"g0"}, "b": {"g2"}}},
		{name: "a strict policy does not refuse a pinned set",
			numa: []int{0, 1}, strict: true,
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g1"}, numa: []int{1}, devices: []string{"/dev/g0", "/dev/g1"}, local: []int{0, 1}},
			},
			after: map[string][]string{"a": {"g0", "g1"}}},
		{name: "a shared unit named k times takes k free shares, lowest first, its node once; replay names it as often",
			shares: 4,
			steps: []step{
				{id: "a", request: "kvm:1", pinned: []string{"kvm"}, devices: []string{"/dev/kvm"}},
				{id: "b", request: "kvm:2", pinned: []string{"kvm", "kvm"}, devices: []string{"/dev/kvm"}},
				{id: "b", request: "kvm:2", pinned: []string{"kvm", "kvm"}, devices: []string{"/dev/kvm"}},
				{id: "b", request: "kvm:1", pinned: []string{"kvm"}, code: protocol.CodeConflict},
				{id: "c", request: "kvm:2", pinned: []string{"kvm", "kvm"}, code: protocol.CodeInsufficient, detail: "kvm: named 2 times, more than its free shares"},
				{id: "c", request: "kvm:1", pinned: []string{"kvm"}, devices: []string{"/dev/kvm"}},
				{id: "d", request: "kvm:1", pinned: []string{"kvm"}, code: protocol.CodeInsufficient, detail: "kvm: held by another request"},
			},
			after: map[string][]string{"a": {"kvm"}, "b": {"kvm/1", "kvm/2"}, "c": {"kvm/3"}}},
		{name: "an unshared key named twice is 103",
			numa: []int{0, 0},
			steps: []step{
				{id: "a", request: "gpu:2", pinned: []string{"g0", "g0"}, code: protocol.CodeInsufficient, detail: "g0: named 2 times"},
			},
			after: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := gpus(tt.numa...)
			if tt.shares > 0 {
				h = &host{names: map[string][]string{}}
				for i := range tt.shares {
					h.devs = append(h.devs, Device{Key: ShareKey("kvm", i), Index: i, NUMA: alloc.Unknown, Nodes: []string{"/dev/kvm"}})
				}
			}
			e := newEnv(t, h)
			e.pool.Strict = tt.strict
			if tt.inv != nil {
				e.pool.Lister = listFunc(func(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
					var out []protocol.DeviceInfo
					for k, why := range tt.inv {
						out = append(out, protocol.DeviceInfo{Key: k, Reason: why})
					}
					return out, nil
				})
			}
			for i, s := range tt.steps {
				e.run(i, s)
			}
			e.wantStore(tt.after)
		})
	}
}

// ShareOf undoes ShareKey; a key of no share is share 0 of itself.
func TestShareOf(t *testing.T) {
	for _, tt := range []struct {
		key  string
		unit string
		i    int
	}{
		{"kvm", "kvm", 0},
		{ShareKey("kvm", 1), "kvm", 1},
		{ShareKey("1a86:7523:A5", 4096), "1a86:7523:A5", 4096},
		{"kvm/x", "kvm", 0},
		{"kvm/0", "kvm", 0},
	} {
		if unit, i := ShareOf(tt.key); unit != tt.unit || i != tt.i {
			t.Errorf("ShareOf(%q) = %q, %d; want %q, %d", tt.key, unit, i, tt.unit, tt.i)
		}
	}
}
