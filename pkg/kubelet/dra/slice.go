package dra

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdi-exec/plugins/pkg/kubelet/bridge"
	"github.com/cdi-exec/plugins/pkg/kubelet/claimstate"
	"github.com/cdi-exec/plugins/pkg/kubelet/devname"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/sysfs"
)

// The attributes of a device, in the driver's domain.
const (
	attrKey        resourceapi.QualifiedName = "key" // the exec protocol's device key
	attrNUMA       resourceapi.QualifiedName = "numaNode"
	attrPCIAddress resourceapi.QualifiedName = "pciAddress"
	attrVendorID   resourceapi.QualifiedName = "vendorId"
	attrPCIeSwitch resourceapi.QualifiedName = "pcieSwitch" // the switch's upstream port, "0000:17:00.0"
	attrDeviceID   resourceapi.QualifiedName = "deviceId"
)

// refresh asks every config's plugin for its devices (bridge.Refresh)
// and publishes the slice when what it offers changed.
func (d *driver) refresh(ctx context.Context) {
	if !bridge.Refresh(ctx, d.caller, d.confs, &d.mu, d.answers, d.failing, d.log) {
		return
	}
	claims, err := d.state.Read(ctx)
	if err != nil {
		d.log.Error("cannot read the claim records; slice left as it is", "err", err)
		return
	}
	d.mu.Lock()
	d.inv = bridge.Merge(d.answers)
	devs := d.offer(claims)
	due := !d.published || !equality.Semantic.DeepEqual(devs, d.offered)
	d.offered = devs
	d.mu.Unlock()
	if due {
		if err := d.publish(ctx); err != nil {
			d.log.Error("publishing the slice failed", "err", err)
		}
	}
}

// offer turns the inventory into slice devices. A device held by a
// request-id that is not one of this driver's claims is left out while it
// is held: a non-Kubernetes caller (or the device-plugin mode) has it.
// Devices of this driver's claims stay, as the scheduler counts them
// allocated.
func (d *driver) offer(claims claimstate.Claims) []resourceapi.Device {
	var out []resourceapi.Device
	for _, dev := range d.inv.Devices {
		if _, ours := claims[dev.HeldBy]; dev.HeldBy != "" && !ours {
			continue
		}
		name, err := devname.Name(dev.Key)
		if err != nil {
			if !d.unnamed[dev.Key] {
				d.log.Warn("device not offered: its key has no device name", "key", dev.Key, "err", err)
				d.unnamed[dev.Key] = true
			}
			continue
		}
		out = append(out, resourceapi.Device{Name: name, Attributes: attributes(dev)})
	}
	for _, k := range d.inv.Skipped {
		if !d.unnamed[k] {
			d.log.Warn("device not offered: its key cannot be named in a pinned ADD", "key", k)
			d.unnamed[k] = true
		}
	}
	return out
}

// attributes describes a device to DeviceClass and claim selectors.
func attributes(dev protocol.DeviceInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{attrKey: str(dev.Key)}
	if dev.NUMA >= 0 {
		n := int64(dev.NUMA)
		a[attrNUMA] = resourceapi.DeviceAttribute{IntValue: &n}
	}
	if sysfs.IsPCIAddr(dev.Key) {
		a[attrPCIAddress] = str(dev.Key)
	}
	if dev.VendorID != "" {
		a[attrVendorID] = str(dev.VendorID)
	}
	if dev.DeviceID != "" {
		a[attrDeviceID] = str(dev.DeviceID)
	}
	if dev.PCIeRoot != "" { // the kernel's name, "pci0000:00", is the standard's form
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(dev.PCIeRoot)
	}
	if dev.PCIeSwitch != "" {
		a[attrPCIeSwitch] = str(dev.PCIeSwitch)
	}
	return a
}

// publish hands the offered devices to the helper's slice controller,
// which writes them to the API server in the background: one pool named
// after the node, in slices of at most ResourceSliceMaxDevices.
func (d *driver) publish(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.helper == nil {
		return nil
	}
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{}}}
	for i, dev := range d.offered {
		if i > 0 && i%resourceapi.ResourceSliceMaxDevices == 0 {
			pool.Slices = append(pool.Slices, resourceslice.Slice{})
		}
		last := &pool.Slices[len(pool.Slices)-1]
		last.Devices = append(last.Devices, dev)
	}
	err := d.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.node: pool}})
	if err != nil {
		return err
	}
	d.published = true
	d.log.Info("slice published", "devices", len(d.offered), "slices", len(pool.Slices))
	return nil
}

// poll refreshes the devices every interval until ctx ends.
func (d *driver) poll(ctx context.Context, interval time.Duration) {
	bridge.Every(ctx, interval, nil, func() { d.refresh(ctx) })
}
