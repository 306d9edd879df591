package dra

import (
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// An NVIDIA GPU's UUID from DEVICES is published as the uuid attribute;
// a device without one has none.
func TestUUIDAttribute(t *testing.T) {
	for _, tt := range []struct {
		uuid string
		want bool
	}{{"GPU-475a5044-0000", true}, {"", false}} {
		a := attributes(protocol.DeviceInfo{Key: "0000:00:06.0", NUMA: -1, UUID: tt.uuid})
		got, ok := a[attrUUID]
		if ok != tt.want || ok && (got.StringValue == nil || *got.StringValue != tt.uuid) {
			t.Errorf("uuid %q: attribute %+v %v", tt.uuid, got, ok)
		}
	}
}

// A device of a no-IOMMU VFIO group is published with noiommu true; any
// other has no such attribute.
func TestNoIOMMUAttribute(t *testing.T) {
	for _, noiommu := range []bool{true, false} {
		a := attributes(protocol.DeviceInfo{Key: "0000:9a:00.0", NUMA: -1, NoIOMMU: noiommu})
		got, ok := a[attrNoIOMMU]
		if ok != noiommu || ok && (got.BoolValue == nil || !*got.BoolValue) {
			t.Errorf("noiommu %v: attribute %+v %v", noiommu, got, ok)
		}
	}
}
