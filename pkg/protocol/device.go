package protocol

// DeviceInfo is one device of a plugin's inventory, as the DEVICES
// extension answers it (docs/protocol.md#extension-devices).
type DeviceInfo struct {
	Key    string   `json:"key"`
	Nodes  []string `json:"nodes"`
	NUMA   int      `json:"numa"`
	Usable bool     `json:"usable"`
	Reason string   `json:"reason,omitempty"` // why it is not usable
	HeldBy string   `json:"heldBy,omitempty"` // request-id holding it
	// VendorID and DeviceID are a PCI device's ids as sysfs gives them
	// ("0x10de"), so that inventory tools can name the device without
	// reading the host themselves.
	VendorID string `json:"vendorId,omitempty"`
	DeviceID string `json:"deviceId,omitempty"`
	// PCIeRoot is the root complex the device sits below, as the kernel
	// names it ("pci0000:00"); PCIeBridges the PCI functions between it and
	// the device, root port first.
	PCIeRoot    string   `json:"pcieRoot,omitempty"`
	PCIeBridges []string `json:"pcieBridges,omitempty"`
	// PCIeSwitch is the device's PCIe switch: the topmost bridge below its
	// root port (the switch's upstream port), absent for a device on the
	// root bus or on its root port's own link.
	PCIeSwitch string `json:"pcieSwitch,omitempty"`
	// UUID is the device's own identity where its driver gives one (an
	// NVIDIA GPU's "GPU-..." from /proc/driver/nvidia/gpus/<addr>/information),
	// as NVIDIA's own DRA driver publishes it.
	UUID string `json:"uuid,omitempty"`
	// PhysFn is, for an SR-IOV VF, the PCI address of its PF: the VFs of
	// one PF share what the PF can have (the DRA mode's shared counters).
	PhysFn string `json:"physfn,omitempty"`
	// NoIOMMU marks a device of a no-IOMMU VFIO group
	// (/dev/vfio/noiommu-<group>): no IOMMU confines its DMA. The plugins
	// hand one out only when their config says allow_noiommu.
	NoIOMMU bool `json:"noiommu,omitempty"`
	// The generic plugin's attributes (docs/plugins.md#generic), left out
	// by the other plugins: the sysfs class and driver of the unit's
	// first node, the USB device it hangs off (ids as sysfs gives them,
	// "1a86"), and the PCI function it is or hangs off.
	Class      string `json:"class,omitempty"`
	Driver     string `json:"driver,omitempty"`
	USBVendor  string `json:"usbVendor,omitempty"`
	USBProduct string `json:"usbProduct,omitempty"`
	USBSerial  string `json:"usbSerial,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
	// Shares is how many requests may hold the device at once, when more
	// than one; Holders then lists the request-id holding each held
	// share, in share order (an id holding two shares is listed twice,
	// so len(Holders) is the number of shares held), and HeldBy is left
	// empty.
	Shares  int      `json:"shares,omitempty"`
	Holders []string `json:"holders,omitempty"`
	// Unlimited says that any number of requests may hold the device at
	// once (a generic rule's "shares": "unlimited"): Shares is then left
	// out, and Holders lists the holder of each held share as above.
	Unlimited bool `json:"unlimited,omitempty"`
}

// Shared reports whether more than one request may hold the device at
// once: Holders, not HeldBy, then says who holds it.
func (d DeviceInfo) Shared() bool { return d.Unlimited || d.Shares > 1 }
