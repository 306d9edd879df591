package vfio

import (
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/test/fixture"
)

func TestUnusableAndEndpoints(t *testing.T) {
	gpu := Function{Addr: "0000:9a:00.0", Driver: Driver, Class: "0x030000"}
	audio := Function{Addr: "0000:9a:00.1", Driver: Driver, Class: "0x040300"}
	bridge := Function{Addr: "0000:99:00.0", Driver: "pcieport", Class: "0x060400"}
	for _, tt := range []struct {
		members   []Function
		why       string
		endpoints []string
	}{
		{[]Function{gpu}, "", []string{gpu.Addr}},
		{[]Function{gpu, audio}, "", []string{gpu.Addr, audio.Addr}},
		{[]Function{bridge, gpu, audio}, "", []string{gpu.Addr, audio.Addr}},
		{[]Function{gpu, {Addr: audio.Addr, Driver: "snd_hda_intel", Class: audio.Class}},
			"IOMMU group 7: 0000:9a:00.1 is bound to snd_hda_intel, not vfio-pci (bind every function of the group to vfio-pci)", nil},
		{[]Function{gpu, {Addr: audio.Addr, Class: audio.Class}},
			"IOMMU group 7: 0000:9a:00.1 is bound to no driver, not vfio-pci (bind every function of the group to vfio-pci)", nil},
	} {
		if got := Unusable("7", tt.members); got != tt.why {
			t.Errorf("Unusable(%v) = %q, want %q", tt.members, got, tt.why)
		}
		if tt.why == "" && !slices.Equal(Endpoints(tt.members), tt.endpoints) {
			t.Errorf("Endpoints(%v) = %v", tt.members, Endpoints(tt.members))
		}
	}
}

// A group is a no-IOMMU group when its node is /dev/vfio/noiommu-<group>:
// GroupNode hands that node out, NoIOMMU says so, and RefuseNoIOMMU
// refuses it unless allowed, naming the config arg.
func TestNoIOMMU(t *testing.T) {
	h := fixture.VFIOHost()
	h.NoIOMMUGroups = []int{31}
	root := t.TempDir()
	if err := h.Build(root); err != nil {
		t.Fatal(err)
	}
	host := &sysfs.Host{Root: root}
	for _, tt := range []struct {
		group, node string
		noiommu     bool
	}{
		{"20", "/dev/vfio/20", false},
		{"31", "/dev/vfio/noiommu-31", true},
		{"99", "", false},
		{"", "", false},
	} {
		if got := GroupNode(host, tt.group); got != tt.node {
			t.Errorf("GroupNode(%q) = %q, want %q", tt.group, got, tt.node)
		}
		if got := NoIOMMU(host, tt.group); got != tt.noiommu {
			t.Errorf("NoIOMMU(%q) = %v", tt.group, got)
		}
	}
	if why := RefuseNoIOMMU("31", false); !strings.Contains(why, "IOMMU group 31 is a no-IOMMU group (/dev/vfio/noiommu-31)") ||
		!strings.Contains(why, `"allow_noiommu": true`) {
		t.Errorf("RefuseNoIOMMU: %q", why)
	}
	if why := RefuseNoIOMMU("31", true); why != "" {
		t.Errorf("RefuseNoIOMMU allowed: %q", why)
	}
}
