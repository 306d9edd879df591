package main

import (
	"context"
	"fmt"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// vfState is what the plugin sees of one VF now.
type vfState struct {
	addr    string
	numa    int
	group   string // IOMMU group; "" when none
	noiommu bool   // the group is a no-IOMMU group (vfio.NoIOMMU)
	reason  string // why it cannot be handed out; "" when it can
}

// vfStates lists a PF's current VFs in VF order, each judged.
func (p *plugin) vfStates(f pf) []vfState {
	var out []vfState
	for _, addr := range sysfs.VFs(f.dir, f.total) {
		s := vfState{addr: addr, numa: f.numa, reason: "its device directory is missing"}
		if d, err := sysfs.OpenDir(p.host.PCIDir(addr)); err == nil {
			if n := d.NUMA(); n >= 0 {
				s.numa = n
			}
			s.group, s.reason = p.judge(d)
			s.noiommu = vfio.NoIOMMU(p.host, s.group)
			d.Close()
		}
		out = append(out, s)
	}
	return out
}

// wantDriver is the driver a VF must be bound to when it is handed out
// without a delegate.
func (p *plugin) wantDriver() string {
	if p.vfDriver != "" {
		return p.vfDriver
	}
	return vfio.Driver
}

// judge returns a VF's IOMMU group and why it cannot be handed out ("" when
// it can). A delegate judges its own devices. Without one a VF is handed
// out as its VFIO group, so it must be bound to vfio-pci, as its driver
// link says; with vf_driver set, ADD binds it first.
func (p *plugin) judge(d *sysfs.Dir) (group, reason string) {
	group = vfio.GroupOf(d)
	switch drv := d.LinkBase("driver"); {
	case p.delegate != nil:
		return group, ""
	case group == "":
		return "", "no IOMMU group (is the IOMMU enabled?)"
	case vfio.NoIOMMU(p.host, group) && !p.allowNoIOMMU:
		return group, vfio.RefuseNoIOMMU(group, false)
	case p.vfDriver != "":
		return group, ""
	case drv == "":
		return group, "bound to no driver, not vfio-pci (bind it to vfio-pci, or set vf_driver)"
	case drv != vfio.Driver:
		return group, fmt.Sprintf("bound to %s, not vfio-pci (bind it to vfio-pci, or set vf_driver)", drv)
	case vfio.GroupNode(p.host, group) == "":
		return group, fmt.Sprintf("bound to vfio-pci but /dev/vfio/%s does not exist", group)
	}
	return group, ""
}

// Inventory answers DEVICES: every VF of the selected PFs with whether it
// can be handed out and why not, and each PF that has no VFs yet.
func (p *plugin) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	pfs, err := p.pfs()
	if err != nil {
		return nil, err
	}
	var out []protocol.DeviceInfo
	for _, f := range pfs {
		vfs := p.vfStates(f)
		if len(vfs) == 0 {
			out = append(out, p.toBe(f)...)
		}
		f.dir.Close()
		for _, v := range vfs {
			nodes := []string{}
			switch {
			case p.delegate != nil || v.group == "":
			case v.noiommu:
				nodes = append(nodes, "/dev/vfio/noiommu-"+v.group)
			default:
				nodes = append(nodes, "/dev/vfio/"+v.group)
			}
			out = append(out, p.info(v.addr, protocol.DeviceInfo{Nodes: nodes, NUMA: v.numa, Usable: v.reason == "", Reason: v.reason,
				PhysFn: f.addr, NoIOMMU: v.noiommu}))
		}
	}
	return out, nil
}

// toBe lists what a PF without VFs offers: the VFs the next ADD creates
// on it, under the addresses they will have (sysfs.VFAddr), so that a
// caller that picks devices itself (the DRA mode) can name them in a
// pinned ADD, which creates them. That holds when ADD can make a new VF
// usable at once: with a delegate, which judges its own devices, or with
// vf_driver, which ADD binds. Otherwise, and when the PF does not say
// where its VFs go, the PF itself is listed, unusable, saying what ADD
// will do.
func (p *plugin) toBe(f pf) []protocol.DeviceInfo {
	n := min(p.numVFs, f.total)
	if p.delegate != nil || p.vfDriver != "" {
		var out []protocol.DeviceInfo
		for k := range n {
			addr, err := sysfs.VFAddr(f.dir, f.addr, k)
			if err != nil {
				out = nil
				break
			}
			out = append(out, protocol.DeviceInfo{Key: addr, Nodes: []string{}, NUMA: f.numa, Usable: true, PhysFn: f.addr})
		}
		if out != nil {
			return out
		}
	}
	return []protocol.DeviceInfo{p.info(f.addr, protocol.DeviceInfo{Nodes: []string{}, NUMA: f.numa,
		Reason: fmt.Sprintf("a PF without VFs: the next ADD creates %d", n)})}
}

// info completes a PCI function's inventory entry with its key and ids.
func (p *plugin) info(addr string, d protocol.DeviceInfo) protocol.DeviceInfo {
	d.Key = addr
	if dir, err := sysfs.OpenDir(p.host.PCIDir(addr)); err == nil {
		d.VendorID, d.DeviceID = lowerAttr(dir, "vendor"), lowerAttr(dir, "device")
		dir.Close()
	}
	return d
}
