package main

import (
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
)

// The modes without DRM nodes, nvidia-compute (compute.go) and VFIO
// (vfio.go), keep no discovery cache: every command lists the mode's GPUs
// from the host and reads each one. A source is where a mode lists and
// reads them; Discover, Capacity and Inventory are one loop over it
// (candidates), whatever the mode.

// source lists and reads the GPUs of a mode without DRM nodes.
type source interface {
	// addrs lists the PCI addresses of the mode's GPUs, sorted; none
	// when its driver is not loaded.
	addrs() ([]string, error)
	// read reads the GPU at addr, the pos-th of the listing, and judges
	// it by the config; false when it is none of the mode's (gone since
	// the listing, not a display controller).
	read(addr string, pos int) (candidate, bool)
	// uuid is a GPU's UUID for DEVICES, "" when it has none.
	uuid(c *candidate) string
}

// candidate is one GPU a source read, judged by the config.
type candidate struct {
	fact  fact
	index int      // preference order, lower first
	nodes []string // when usable: its nodes as discovery names them
	live  pool.Resolver
	uuid  string // when the read gave it
	// noiommu marks a GPU of a no-IOMMU VFIO group (vfio.go), usable or
	// not.
	noiommu bool
	// reason says why the GPU is not handed out; "" when it is usable,
	// and then live is its live check.
	reason string
}

// sourceOf is the source of a filter's mode; nil for the DRM mode.
func sourceOf(p *plugin) source {
	switch {
	case p.filter.compute:
		return computeSource{p}
	case p.filter.vfio != "":
		return vfioSource{p}
	}
	return nil
}

// candidates reads every GPU the source lists, skipping those skip says
// (held by another request).
func (p *plugin) candidates(skip func(key string) bool) ([]candidate, error) {
	addrs, err := p.src.addrs()
	if err != nil {
		return nil, err
	}
	out := make([]candidate, 0, len(addrs))
	for i, addr := range addrs {
		if skip != nil && skip(addr) {
			continue
		}
		if c, ok := p.src.read(addr, i); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// discoverSource is Discover in a mode without DRM nodes: the usable
// candidates.
func (p *plugin) discoverSource(scan pool.Scan) ([]pool.Device, error) {
	if scan.Rescan {
		p.host.Forget()
	}
	cs, err := p.candidates(scan.Skipped)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Device, 0, len(cs))
	for i := range cs {
		c := &cs[i]
		if c.reason == "" {
			out = append(out, pool.Device{Key: c.fact.key(), Index: c.index, NUMA: c.fact.numa, Nodes: c.nodes,
				Live: c.live, Dir: p.host.Path(c.fact.sys)})
		}
	}
	return out, nil
}

// inventorySource is Inventory in a mode without DRM nodes: every
// candidate, a usable one with the nodes its live check gives.
func (p *plugin) inventorySource() ([]protocol.DeviceInfo, error) {
	cs, err := p.candidates(nil)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, len(cs))
	for i := range cs {
		c := &cs[i]
		addr := c.fact.key()
		nodes := []string{}
		if c.reason == "" {
			var err error
			if nodes, err = c.live.Resolve(); err != nil {
				c.reason, nodes = err.Error(), []string{}
			}
		}
		pcie := sysfs.ParsePCIe(c.fact.sys)
		out[i] = protocol.DeviceInfo{Key: addr, Nodes: nodes, NUMA: c.fact.numa, Usable: c.reason == "", Reason: c.reason, NoIOMMU: c.noiommu,
			VendorID: c.fact.vendor, DeviceID: c.fact.device, UUID: p.src.uuid(c),
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(addr), PCIeSwitch: pcie.Switch(addr)}
	}
	return out, nil
}
