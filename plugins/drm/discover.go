package main

import (
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/sysfs"
)

// gpu is one DRM device as the plugin sees it: the device it would hand
// out, or the reason it will not.
type gpu struct {
	Device pool.Device
	Reason string   // "" when usable
	minors []string // every DRM node of the device, "/dev/dri/<minor>"
	dir    string   // its sysfs device directory
}

// inventory lists the host's DRM devices and decides for each whether the
// config may hand it out. It reads attributes only as far as the decision
// needs, cheapest test first: this runs on every INFO and ADD.
func inventory(h *sysfs.Host, f filter, scan pool.Scan) ([]gpu, error) {
	devs, err := h.DRMDevices(f.want...)
	if err != nil {
		return nil, err
	}
	out := make([]gpu, 0, len(devs))
	for _, d := range devs {
		g := gpu{Device: pool.Device{Index: d.Order(), NUMA: -1, Dir: d.Dir}, dir: d.Dir}
		for _, m := range d.Minors {
			g.minors = append(g.minors, "/dev/dri/"+m.Name)
		}
		g.Reason = check(h, f, d, &g.Device, scan)
		out = append(out, g)
	}
	return out, nil
}

// check fills dev and returns why the device is not usable, or "".
func check(h *sysfs.Host, f filter, d sysfs.DRMDevice, dev *pool.Device, scan pool.Scan) string {
	addr, isPCI := d.PCIAddr()
	if isPCI {
		dev.Key = addr
	} else {
		dev.Key = h.SysPath(d.Dir) // platform device: keyed by its sysfs path
	}
	switch {
	case scan.Skipped(dev.Key):
		return "held by another request"
	case f.addrs != nil && !f.addrs[addr]:
		return "not in pci_addresses"
	case !isPCI && (f.vendors != nil || f.devices != nil):
		return "not a PCI device (id whitelist set)"
	}
	dir, err := sysfs.OpenDir(d.Dir)
	if err != nil {
		return "device directory missing (dangling class link)"
	}
	defer dir.Close()
	if isPCI {
		if f.vendors != nil && !f.vendors[lower(dir.Attr("vendor"))] {
			return "vendor not in vendorid_whitelist"
		}
		if f.devices != nil && !f.devices[lower(dir.Attr("device"))] {
			return "device not in deviceid_whitelist"
		}
		if f.addrs == nil && dir.LinkBase("physfn") != "" {
			return "SR-IOV VF (handed out only when pci_addresses names it)"
		}
		if n, _ := strconv.Atoi(lower(dir.Attr("sriov_numvfs"))); n > 0 {
			return "SR-IOV PF with active VFs"
		}
	}
	var minors []sysfs.Minor
	for _, kind := range f.want {
		for _, m := range d.Minors {
			if m.Kind == kind && h.NodeExists("dri/"+m.Name) {
				minors = append(minors, m)
				dev.Nodes = append(dev.Nodes, "/dev/dri/"+m.Name)
				break
			}
		}
	}
	switch {
	case len(minors) == 0 && len(d.Minors) == 0:
		return "no wanted device node"
	case len(minors) == 0:
		return "wanted device node missing from /dev"
	}
	dev.Resolve = func() ([]string, error) {
		nodes := make([]string, len(minors))
		for i, m := range minors {
			var err error
			if nodes[i], err = h.ResolveNode(d.MinorDir(m), "dri/"+m.Name); err != nil {
				return nil, err
			}
		}
		return nodes, nil
	}
	if scan.NUMA && isPCI {
		dev.NUMA = dir.NUMA()
	}
	return ""
}

// lower returns an attribute in lower case; "" when it was unreadable.
func lower(v string, err error) string {
	if err != nil {
		return ""
	}
	return strings.ToLower(v)
}
