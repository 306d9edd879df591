package dra

import (
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
)

// A device's PCIe switch is published as the pcieSwitch attribute, so
// that a claim can ask for devices under one switch (matchAttribute); a
// device under no switch has none.
func TestAttributeSwitch(t *testing.T) {
	under := protocol.DeviceInfo{Key: "0000:18:00.0", NUMA: 0, Usable: true, PCIeRoot: "pci0000:15",
		PCIeBridges: []string{"0000:15:01.0", "0000:16:00.0", "0000:17:00.0"}, PCIeSwitch: "0000:16:00.0"}
	a := attributes(under)
	if v := a[attrPCIeSwitch].StringValue; v == nil || *v != "0000:16:00.0" {
		t.Fatalf("pcieSwitch of a GPU under a switch: %+v", a[attrPCIeSwitch])
	}
	alone := under
	alone.PCIeSwitch, alone.PCIeBridges = "", []string{"0000:15:01.0"}
	if _, ok := attributes(alone)[attrPCIeSwitch]; ok {
		t.Fatal("pcieSwitch published for a GPU on its root port's own link")
	}
}
