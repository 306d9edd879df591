package vfio

import (
	"slices"
	"testing"
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
