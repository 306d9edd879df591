package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
)

// VFIO mode (mode "vfio" or "iommufd"): whole GPUs bound to vfio-pci,
// for VMs (docs/plugins.md#whole-gpus-for-vms-vfio). A GPU is handed out
// with its whole IOMMU group (its audio function, say), as
// /dev/vfio/<group> then the container /dev/vfio/vfio, or in mode
// "iommufd" as each function's /dev/vfio/devices/vfio<N> then
// /dev/iommu. A group whose other endpoint functions are not all bound to
// vfio-pci is not handed out. The key is the GPU's PCI address, as in the
// other modes, in the same store.
//
// Like compute mode it keeps no discovery cache: it lists
// /sys/bus/pci/drivers/vfio-pci and reads, per display function there, its
// attributes, its group's members and nodes.

// The VFIO modes, and the want_device_nodes value that meant each in a
// config without mode.
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
		return fmt.Errorf("%s: applies to GPUs handed out by their IOMMU group only (mode %q or %q)", vfio.AllowNoIOMMU, vfioGroup, vfioIOMMUFD)
	}
	f.allowNoIOMMU = a.AllowNoIOMMU
	return nil
}

// vfioAddrs lists the display functions (class 0x03) bound to vfio-pci,
// sorted.
func vfioAddrs(h *sysfs.Host) ([]string, error) {
	return pciAddrsIn(h, h.Sys("bus", "pci", "drivers", vfio.Driver))
}

// vfioSource is the source of the VFIO modes: the display functions
// bound to vfio-pci.
type vfioSource struct{ p *plugin }

// addrs implements source.
func (s vfioSource) addrs() ([]string, error) { return vfioAddrs(&s.p.host) }

// uuid implements source: a GPU bound to vfio-pci has none the host tells.
func (vfioSource) uuid(*candidate) string { return "" }

// read implements source: the function at addr, preferred in the order
// of the listing, handed out as its IOMMU group's nodes.
func (s vfioSource) read(addr string, pos int) (candidate, bool) {
	g, ok := s.p.vfioGPU(addr)
	c := candidate{fact: g.fact, index: pos, nodes: g.nodes, reason: g.reason, noiommu: g.noiommu}
	if ok && c.reason == "" {
		c.live = &liveVFIO{p: s.p, addr: addr}
	}
	return c, ok
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
		return nil, vfio.IOMMU + " does not exist: the kernel offers no iommufd (use mode \"vfio\")"
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
