package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// VFIO mode (want_device_nodes ["vfio"] or ["iommufd"]): whole GPUs bound
// to vfio-pci, for VMs (docs/plugins.md#whole-gpus-for-vms-vfio). A GPU is
// handed out with its whole IOMMU group (its audio function, say), as
// /dev/vfio/<group> then the container /dev/vfio/vfio, or with
// ["iommufd"] as each function's /dev/vfio/devices/vfio<N> then
// /dev/iommu. A group whose other endpoint functions are not all bound to
// vfio-pci is not handed out. The key is the GPU's PCI address, as in the
// other modes, in the same store.
//
// Like compute mode it keeps no discovery cache: it lists
// /sys/bus/pci/drivers/vfio-pci and reads, per display function there, its
// attributes, its group's members and nodes.

// The want_device_nodes values of VFIO mode, each alone.
const (
	vfioGroup   = "vfio"
	vfioIOMMUFD = "iommufd"
)

// vfioGPU is one display function bound to vfio-pci, as a VFIO config sees
// it.
type vfioGPU struct {
	fact    fact
	group   string
	noiommu bool     // the group is a no-IOMMU group (vfio.NoIOMMU)
	nodes   []string // when usable: the nodes to hand out
	reason  string   // "" when usable
}

// validNoIOMMU takes allow_noiommu into f: it is VFIO mode's only.
func (a args) validNoIOMMU(f *filter) error {
	if a.AllowNoIOMMU && f.vfio == "" {
		return fmt.Errorf("%s: applies to GPUs handed out by their IOMMU group only (want_device_nodes [%q] or [%q])", vfio.AllowNoIOMMU, vfioGroup, vfioIOMMUFD)
	}
	f.allowNoIOMMU = a.AllowNoIOMMU
	return nil
}

// vfioAddrs lists the display functions (class 0x03) bound to vfio-pci,
// sorted.
func vfioAddrs(h *sysfs.Host) ([]string, error) {
	return pciAddrsIn(h, h.Sys("bus", "pci", "drivers", vfio.Driver))
}

// vfioGPUs reads and judges every display function bound to vfio-pci,
// skipping those skip says.
func (p *plugin) vfioGPUs(skip func(key string) bool) ([]vfioGPU, error) {
	addrs, err := vfioAddrs(&p.host)
	if err != nil {
		return nil, err
	}
	out := make([]vfioGPU, 0, len(addrs))
	for _, addr := range addrs {
		if skip != nil && skip(addr) {
			continue
		}
		if g, ok := p.vfioGPU(addr); ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// vfioGPU reads and judges one function bound to vfio-pci; false when it
// is no display controller.
func (p *plugin) vfioGPU(addr string) (vfioGPU, bool) {
	g := vfioGPU{fact: fact{sys: "/sys/bus/pci/devices/" + addr, flags: isPCI, numa: -1}}
	sys, err := p.host.Resolve(p.host.PCIDir(addr))
	if err != nil {
		return g, false // gone since the listing
	}
	g.fact.sys = sys
	dir, err := sysfs.OpenDir(p.host.Path(sys))
	if err != nil {
		return g, false
	}
	defer dir.Close()
	if !strings.HasPrefix(lower(dir.Attr("class")), "0x03") {
		return g, false
	}
	g.fact.readPCI(dir, true)
	g.group = vfio.GroupOf(dir)
	g.noiommu = vfio.NoIOMMU(&p.host, g.group)
	if g.reason = p.filter.check(&g.fact, addr); g.reason != "" {
		return g, true
	}
	if dir.LinkBase("driver") != vfio.Driver {
		g.reason = "not bound to " + vfio.Driver
		return g, true
	}
	if g.group == "" {
		g.reason = "no IOMMU group (is the IOMMU enabled?)"
		return g, true
	}
	if g.noiommu {
		if g.reason = vfio.RefuseNoIOMMU(g.group, p.filter.allowNoIOMMU); g.reason != "" {
			return g, true
		}
	}
	g.nodes, g.reason = p.vfioNodes(addr, g.group)
	return g, true
}

// vfioNodes judges a GPU's IOMMU group and returns the nodes that stand
// for it, or why it cannot be handed out.
func (p *plugin) vfioNodes(addr, group string) ([]string, string) {
	h := &p.host
	members, err := vfio.Members(h, group)
	if err != nil {
		return nil, err.Error()
	}
	if why := vfio.Unusable(group, members); why != "" {
		return nil, why
	}
	for _, m := range members {
		if m.Addr == addr {
			break
		}
		if strings.HasPrefix(m.Class, "0x03") {
			return nil, fmt.Sprintf("handed out with %s, in the same IOMMU group %s", m.Addr, group)
		}
	}
	if p.filter.vfio == vfioGroup {
		node := vfio.GroupNode(h, group)
		switch {
		case node == "":
			return nil, fmt.Sprintf("IOMMU group %s: /dev/vfio/%s does not exist", group, group)
		case !h.NodeExists("vfio/vfio"):
			return nil, vfio.Container + " does not exist (is vfio loaded?)"
		}
		return []string{node, vfio.Container}, ""
	}
	if !h.NodeExists("iommu") {
		return nil, vfio.IOMMU + " does not exist: the kernel offers no iommufd (use want_device_nodes [\"vfio\"])"
	}
	var nodes []string
	for _, a := range vfio.Endpoints(members) {
		node, err := vfio.CDev(h, a)
		if err != nil {
			return nil, err.Error()
		}
		nodes = append(nodes, node)
	}
	return append(nodes, vfio.IOMMU), ""
}

// vfioDevice is the pool device of a usable GPU.
func (p *plugin) vfioDevice(g *vfioGPU, index int) pool.Device {
	return pool.Device{Key: g.fact.key(), Index: index, NUMA: g.fact.numa, Nodes: g.nodes,
		Live: &liveVFIO{p: p, addr: g.fact.key()}, Dir: p.host.Path(g.fact.sys)}
}

// discoverVFIO is Discover in VFIO mode.
func (p *plugin) discoverVFIO(scan pool.Scan) ([]pool.Device, error) {
	if scan.Rescan {
		p.host.Forget()
	}
	gpus, err := p.vfioGPUs(scan.Skipped)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Device, 0, len(gpus))
	for i := range gpus {
		if gpus[i].reason == "" {
			out = append(out, p.vfioDevice(&gpus[i], i))
		}
	}
	return out, nil
}

// inventoryVFIO is Inventory in VFIO mode: every display function bound
// to vfio-pci.
func (p *plugin) inventoryVFIO() ([]protocol.DeviceInfo, error) {
	gpus, err := p.vfioGPUs(nil)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, len(gpus))
	for i := range gpus {
		g := &gpus[i]
		addr := g.fact.key()
		nodes := g.nodes
		if nodes == nil {
			nodes = []string{}
		}
		pcie := sysfs.ParsePCIe(g.fact.sys)
		out[i] = protocol.DeviceInfo{Key: addr, Nodes: nodes, NUMA: g.fact.numa, Usable: g.reason == "", Reason: g.reason, NoIOMMU: g.noiommu,
			VendorID: g.fact.vendor, DeviceID: g.fact.device,
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(addr), PCIeSwitch: pcie.Switch(addr)}
	}
	return out, nil
}

// liveVFIO is the live check of a GPU handed out in VFIO mode: judged
// again from the host, group and nodes read anew.
type liveVFIO struct {
	p    *plugin
	addr string
}

// Resolve implements pool.Resolver.
func (l *liveVFIO) Resolve() ([]string, error) {
	g, ok := l.p.vfioGPU(l.addr)
	switch {
	case !ok:
		return nil, fmt.Errorf("%s is no longer a display function bound to %s", l.addr, vfio.Driver)
	case g.reason != "":
		return nil, errors.New(g.reason)
	}
	return g.nodes, nil
}
