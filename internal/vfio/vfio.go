// Package vfio reads how the kernel offers whole PCI functions to VFIO
// users (VMs: Kata, KubeVirt, confidential containers), under a host root
// (CDI_HOST_ROOT): a function's IOMMU group, the group's members and
// whether it can be handed out, and the device nodes that stand for it,
// either the group's /dev/vfio/<group> with the container /dev/vfio/vfio,
// or, where the kernel offers iommufd, each function's
// /dev/vfio/devices/vfio<N> with /dev/iommu. The sriov plugin's VF handout
// and the drm plugin's whole GPUs (mode "vfio" or "iommufd") share it.
package vfio

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
)

// The shared nodes: the legacy container, and iommufd.
const (
	Container = "/dev/vfio/vfio"
	IOMMU     = "/dev/iommu"
)

// Driver is the VFIO driver a function must be bound to.
const Driver = "vfio-pci"

// Function is one PCI function of an IOMMU group.
type Function struct {
	Addr   string
	Driver string // "" when bound to none
	Class  string // lower case, "0x030200"; "" when unreadable
}

// bridge reports whether the function is a PCI bridge (class 0x0604): the
// kernel puts a bridge in its devices' group, but a bridge is never bound
// to a VFIO driver and does not keep the group from use.
func (f Function) bridge() bool { return strings.HasPrefix(f.Class, "0x0604") }

// GroupOf returns the IOMMU group of a PCI function, read from its
// iommu_group link; "" when it has none (no IOMMU).
func GroupOf(d *sysfs.Dir) string { return d.LinkBase("iommu_group") }

// Members lists an IOMMU group's PCI functions, sorted by address, each
// with its driver and class.
func Members(h *sysfs.Host, group string) ([]Function, error) {
	dir := h.Sys("kernel", "iommu_groups", group, "devices")
	var addrs []string
	err := h.List(dir, func(name []byte, _ uint64, _ uint8) {
		if n := string(name); n != "." && n != ".." {
			addrs = append(addrs, n)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("IOMMU group %s: %w", group, err)
	}
	slices.Sort(addrs)
	out := make([]Function, 0, len(addrs))
	for _, a := range addrs {
		f := Function{Addr: a}
		if d, err := sysfs.OpenDir(dir + "/" + a); err == nil {
			f.Driver = d.LinkBase("driver")
			if c, err := d.Attr("class"); err == nil {
				f.Class = strings.ToLower(c)
			}
			d.Close()
		}
		out = append(out, f)
	}
	return out, nil
}

// Unusable says why a group cannot be handed out to a VM, "" when it
// can: every endpoint function in it (bridges aside) must be bound to
// vfio-pci, since the group is one unit to the IOMMU and a function left
// to a host driver would be reachable by the guest's DMA.
func Unusable(group string, members []Function) string {
	for _, f := range members {
		switch {
		case f.bridge() || f.Driver == Driver:
		case f.Driver == "":
			return fmt.Sprintf("IOMMU group %s: %s is bound to no driver, not %s (bind every function of the group to %s)", group, f.Addr, Driver, Driver)
		default:
			return fmt.Sprintf("IOMMU group %s: %s is bound to %s, not %s (bind every function of the group to %s)", group, f.Addr, f.Driver, Driver, Driver)
		}
	}
	return ""
}

// Endpoints are the group's functions that are handed out: all but
// bridges, in address order.
func Endpoints(members []Function) []string {
	var out []string
	for _, f := range members {
		if !f.bridge() {
			out = append(out, f.Addr)
		}
	}
	return out
}

// GroupNode returns the container path of a VFIO group's node,
// /dev/vfio/<group> (or /dev/vfio/noiommu-<group> under VFIO's no-IOMMU
// mode), or "" when neither is a character device in /dev.
func GroupNode(h *sysfs.Host, group string) string {
	for _, name := range []string{"vfio/" + group, "vfio/noiommu-" + group} {
		if h.NodeExists(name) {
			return "/dev/" + name
		}
	}
	return ""
}

// AllowNoIOMMU is the config arg (drm in VFIO mode, sriov) that lets a
// plugin hand out devices of no-IOMMU groups; without it they are
// listed, unusable, and never handed out.
const AllowNoIOMMU = "allow_noiommu"

// NoIOMMU reports whether group is a no-IOMMU group: one that VFIO's
// unsafe no-IOMMU mode (vfio.enable_unsafe_noiommu_mode=1) made for a
// device no IOMMU translates, whose node is /dev/vfio/noiommu-<group>.
// Nothing confines such a device's DMA: whoever holds it can read and
// write all of the host's memory, which makes it root on the host.
func NoIOMMU(h *sysfs.Host, group string) bool {
	return group != "" && h.NodeExists("vfio/noiommu-"+group)
}

// RefuseNoIOMMU says why a no-IOMMU group is not handed out when the
// config does not allow it (AllowNoIOMMU), "" when it may be.
func RefuseNoIOMMU(group string, allow bool) string {
	if allow {
		return ""
	}
	return fmt.Sprintf("IOMMU group %s is a no-IOMMU group (/dev/vfio/noiommu-%s): no IOMMU confines the device's DMA, "+
		"so whoever holds it can reach all of the host's memory; set %q: true in the config to hand it out anyway", group, group, AllowNoIOMMU)
}

// CDev returns the container path of a function's VFIO device node under
// iommufd, /dev/vfio/devices/vfio<N> from its vfio-dev/vfio<N> directory,
// checked to be the character device sysfs describes; "" and why not
// otherwise.
func CDev(h *sysfs.Host, addr string) (string, error) {
	dir := h.PCIDir(addr) + "/vfio-dev"
	var name string
	err := h.List(dir, func(n []byte, _ uint64, _ uint8) {
		if s := string(n); strings.HasPrefix(s, "vfio") {
			name = s
		}
	})
	if err != nil || name == "" {
		return "", fmt.Errorf("%s has no VFIO device file (vfio-dev/vfio<N>): the kernel offers no iommufd for it", addr)
	}
	if err := h.CheckNode("vfio/devices/"+name, dir+"/"+name); err != nil {
		return "", err
	}
	return "/dev/vfio/devices/" + name, nil
}
