package dra

import (
	"testing"

	"github.com/cdi-exec/plugins/pkg/protocol"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
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

// The standard attributes: resource.kubernetes.io/numaNode (and the
// deprecated <driver>/numaNode with it) where the NUMA node is known, never
// for -1; resource.kubernetes.io/pciBusID for a PCI device; uuid where the
// plugin reports one.
func TestStandardAttributes(t *testing.T) {
	gpu := protocol.DeviceInfo{Key: "0000:00:06.0", NUMA: 1, Usable: true, UUID: "GPU-475a5044-0000-0000-0000-000000000000"}
	a := attributes(gpu)
	for _, name := range []resourceapi.QualifiedName{deviceattribute.StandardDeviceAttributeNUMANode, attrNUMA} {
		if v := a[name].IntValue; v == nil || *v != 1 {
			t.Errorf("%s: %+v", name, a[name])
		}
	}
	if v := a[deviceattribute.StandardDeviceAttributePCIBusID].StringValue; v == nil || *v != "0000:00:06.0" {
		t.Errorf("pciBusID: %+v", a[deviceattribute.StandardDeviceAttributePCIBusID])
	}
	if v := a[attrUUID].StringValue; v == nil || *v != gpu.UUID {
		t.Errorf("uuid: %+v", a[attrUUID])
	}
	tty := protocol.DeviceInfo{Key: "tty13", NUMA: -1, Usable: true}
	a = attributes(tty)
	for _, name := range []resourceapi.QualifiedName{deviceattribute.StandardDeviceAttributeNUMANode, attrNUMA, deviceattribute.StandardDeviceAttributePCIBusID, attrUUID} {
		if _, ok := a[name]; ok {
			t.Errorf("a tty of unknown NUMA node has %s", name)
		}
	}
}

// The generic plugin's units carry their class, driver and USB device, so
// that a claim can select "the adapter with serial X" with CEL; a USB
// unit's pciAddress is its controller's.
func TestAttributesGeneric(t *testing.T) {
	dev := protocol.DeviceInfo{Key: "1a86:7523:A50285BI", NUMA: 0, Usable: true, Class: "tty", Driver: "ch341-uart",
		USBVendor: "1a86", USBProduct: "7523", USBSerial: "A50285BI", PCIAddress: "0000:00:14.0"}
	a := attributes(dev)
	for name, want := range map[string]string{"class": "tty", "driver": "ch341-uart", "usbVendor": "1a86",
		"usbProduct": "7523", "usbSerial": "A50285BI", "pciAddress": "0000:00:14.0", "key": dev.Key} {
		v := a[resourceapi.QualifiedName(name)].StringValue
		if v == nil || *v != want {
			t.Errorf("%s = %v, want %q", name, v, want)
		}
	}
	if _, ok := attributes(protocol.DeviceInfo{Key: "kvm", NUMA: -1})[attrUSBSerial]; ok {
		t.Error("usbSerial published for a device without one")
	}
}
