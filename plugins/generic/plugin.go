package main

import (
	"context"
	"path/filepath"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "generic"

var about = skel.About{Name: name, Summary: "hands the device nodes its rules select to containers", New: newPlugin}

type plugin struct {
	pool.Pool
	host sysfs.Host
	cfg  config
	// rules maps the keys of the units the last scan found to their
	// rule, for their permissions.
	rules map[string]int
}

func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err // skel words it, placed at its member
	}
	cfg, err := a.validate()
	if err != nil {
		return nil, err
	}
	p := &plugin{host: sysfs.Host{Root: c.Env.HostRoot}, cfg: cfg}
	p.Pool = pool.Pool{Name: name, Spec: spec, Strict: cfg.strict,
		Discoverer: p, Lister: p, Placer: p, Permitter: p}
	return p, nil
}

// Discover lists a device per share of every usable unit: share i of unit
// u is store key pool.ShareKey(u.key, i). Shares held by other requests
// are left out; indices put share 0 of every unit before share 1 of any,
// so that requests spread over units before they share one.
func (p *plugin) Discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	units, err := p.scan()
	if err != nil {
		return nil, err
	}
	p.remember(units)
	var devs []pool.Device
	for ui, u := range units {
		if !u.usable() {
			continue
		}
		nodes := make([]string, len(u.nodes))
		for i, n := range u.nodes {
			nodes[i] = "/dev/" + n.devname
		}
		for s := range p.cfg.rules[u.rule].shares {
			key := pool.ShareKey(u.key, s)
			if scan.Skipped(key) {
				continue
			}
			devs = append(devs, pool.Device{Key: key, Index: s*len(units) + ui, NUMA: alloc.Unknown,
				Nodes: nodes, Dir: u.sys, Live: live{&p.host, u}})
		}
	}
	return devs, nil
}

// remember keeps the rule of each unit found, for Permissions.
func (p *plugin) remember(units []*unit) {
	p.rules = make(map[string]int, len(units))
	for _, u := range units {
		p.rules[u.key] = u.rule
	}
}

// Permissions implements pool.Permitter: the rule's permissions for
// every share of a unit.
func (p *plugin) Permissions(key string) string {
	if i, ok := p.rules[pool.Unit(key)]; ok {
		return p.cfg.rules[i].permissions
	}
	return ""
}

// Place implements pool.Placer: the NUMA node and PCIe place of the PCI
// function the unit is or hangs off (a USB device's controller).
func (p *plugin) Place(_ context.Context, _ *skel.Call, d pool.Device) (int, []string) {
	if d.Dir == "" {
		return alloc.Unknown, nil
	}
	numa, pcie := p.host.Place(d.Dir)
	return numa, pcie.Chain()
}

// Inventory lists every unit the rules select, usable or not, with its
// attributes.
func (p *plugin) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	units, err := p.scan()
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, 0, len(units))
	for _, u := range units {
		d := protocol.DeviceInfo{Key: u.key, Nodes: make([]string, len(u.nodes)), NUMA: alloc.Unknown,
			Usable: u.usable(), Reason: u.reason, PCIAddress: u.pci}
		for i, n := range u.nodes {
			d.Nodes[i] = "/dev/" + n.devname
		}
		if shares := p.cfg.rules[u.rule].shares; shares > 1 {
			d.Shares = shares
		}
		first := u.nodes[0]
		d.Class = first.class
		if first.sys != "" {
			d.Driver = p.host.DriverOf(first.sys)
			var pcie sysfs.PCIe
			d.NUMA, pcie = p.host.Place(u.sys)
			d.PCIeRoot, d.PCIeBridges, d.PCIeSwitch = pcie.Root, pcie.Bridges(u.pci), pcie.Switch(u.pci)
		}
		if u.usb != nil {
			d.USBVendor, d.USBProduct, d.USBSerial = u.usb.Vendor, u.usb.Product, u.usb.Serial
		}
		out = append(out, d)
	}
	return out, nil
}

// live is the live check of a unit about to be handed out: each node is
// the character device sysfs describes, under the name uevent gives now.
type live struct {
	host *sysfs.Host
	u    *unit
}

// Resolve implements pool.Resolver.
func (l live) Resolve() ([]string, error) {
	out := make([]string, len(l.u.nodes))
	for i, n := range l.u.nodes {
		path, err := l.host.ResolveNode(filepath.Join(l.host.Root, n.sys), n.devname)
		if err != nil {
			return nil, err
		}
		out[i] = path
	}
	return out, nil
}
