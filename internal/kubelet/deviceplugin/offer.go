package deviceplugin

import (
	"github.com/cdi-exec/plugins/internal/kubelet/inventory"
	"github.com/cdi-exec/plugins/internal/kubelet/podgc"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// offer turns the inventory into the kubelet's view: a device held by a
// request-id this mode did not make is unhealthy, because the kubelet
// must not hand it out.
func offer(inv inventory.Inventory, typ string) []Device {
	out := make([]Device, len(inv.Devices))
	for i, d := range inv.Devices {
		out[i] = Device{
			ID:      d.Key,
			NUMA:    d.NUMA,
			PCIe:    chain(d),
			Healthy: d.HeldBy == "" || podgc.Made(d.HeldBy, typ),
			Free:    d.HeldBy == "",
		}
	}
	return out
}

// chain rebuilds a device's place in the PCIe tree as internal/alloc reads it:
// the root complex, the bridges, and the device's own function when it is
// one (a GPU keyed by its PCI address; a USB serial tty hangs off the last
// bridge).
func chain(d protocol.DeviceInfo) []string {
	if d.PCIeRoot == "" {
		return nil
	}
	c := append([]string{d.PCIeRoot}, d.PCIeBridges...)
	if request.IsPCIAddr(d.Key) {
		c = append(c, d.Key)
	}
	return c
}
