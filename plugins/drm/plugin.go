package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
	"github.com/cdi-exec/plugins/pkg/sysfs"
)

const name = "drm"

var about = skel.About{Name: name, Summary: "hands whole GPUs to containers as their DRM device nodes", New: newPlugin}

// args are the drm plugin's config args (docs/plugins.md).
type args struct {
	WantDeviceNodes   []string `json:"want_device_nodes"`
	VendorIDWhitelist []string `json:"vendorid_whitelist"`
	DeviceIDWhitelist []string `json:"deviceid_whitelist"`
	PCIAddresses      []string `json:"pci_addresses"`
	NUMAPolicy        string   `json:"numa_policy"`
}

// filter is the validated form of args.
type filter struct {
	want    []string        // node kinds, in handout order
	vendors map[string]bool // lower-case "0x...."; nil for any
	devices map[string]bool
	addrs   map[string]bool // nil for any (VFs then excluded)
}

func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err
	}
	f, strict, err := a.validate()
	if err != nil {
		return nil, err
	}
	p := &plugin{host: sysfs.NewHost(c.Env.HostRoot), filter: f}
	p.Pool = pool.Pool{Name: name, Spec: spec, Strict: strict, Discover: p.discover, Inventory: p.inventory, Place: p.place}
	return p, nil
}

func (a args) validate() (filter, bool, error) {
	f := filter{want: a.WantDeviceNodes}
	if f.want == nil {
		f.want = []string{sysfs.Primary, sysfs.Render}
	}
	if len(f.want) == 0 {
		return f, false, fmt.Errorf("want_device_nodes is empty; list at least one of %q, %q, %q", sysfs.Primary, sysfs.Render, sysfs.Control)
	}
	for i, k := range f.want {
		if k != sysfs.Primary && k != sysfs.Render && k != sysfs.Control {
			return f, false, fmt.Errorf("want_device_nodes: unknown node type %q; want %q, %q or %q", k, sysfs.Primary, sysfs.Render, sysfs.Control)
		}
		if slices.Contains(f.want[:i], k) {
			return f, false, fmt.Errorf("want_device_nodes: %q listed twice", k)
		}
	}
	var err error
	if f.vendors, err = sysfs.IDSet("vendorid_whitelist", a.VendorIDWhitelist); err != nil {
		return f, false, err
	}
	if f.devices, err = sysfs.IDSet("deviceid_whitelist", a.DeviceIDWhitelist); err != nil {
		return f, false, err
	}
	if f.addrs, err = sysfs.AddrSet("pci_addresses", a.PCIAddresses); err != nil {
		return f, false, err
	}
	strict, err := pool.StrictNUMA(a.NUMAPolicy)
	return f, strict, err
}

type plugin struct {
	pool.Pool
	host   *sysfs.Host
	filter filter
}

func (p *plugin) discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	gpus, err := inventory(p.host, p.filter, scan)
	if err != nil {
		return nil, err
	}
	var out []pool.Device
	for _, g := range gpus {
		if g.Reason == "" {
			out = append(out, g.Device)
		}
	}
	return out, nil
}

func (p *plugin) inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	gpus, err := inventory(p.host, p.filter, pool.Scan{}) // NUMA: from Place below
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, len(gpus))
	for i, g := range gpus {
		nodes := g.Device.Nodes
		if g.Reason == "" {
			if _, err := g.Device.Resolve(); err != nil {
				g.Reason = err.Error() // ADD would not hand it out
			}
		}
		if g.Reason != "" {
			nodes = g.minors // what the device has, for people to see
		}
		numa, pcie := p.host.Place(p.host.SysPath(g.dir)) // unusable devices too
		out[i] = protocol.DeviceInfo{Key: g.Device.Key, Nodes: nodes, NUMA: numa, Usable: g.Reason == "", Reason: g.Reason,
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(g.Device.Key)}
		if sysfs.IsPCIAddr(g.Device.Key) {
			out[i].VendorID = lower(sysfs.ReadAttr(g.dir + "/vendor"))
			out[i].DeviceID = lower(sysfs.ReadAttr(g.dir + "/device"))
		}
	}
	return out, nil
}

// place is where a GPU sits: its NUMA node, read by discovery for ADD, and
// its PCIe chain, parsed from the device directory discovery resolved.
func (p *plugin) place(_ context.Context, _ *skel.Call, d pool.Device) (int, []string) {
	return d.NUMA, sysfs.ParsePCIe(p.host.SysPath(d.Dir)).Chain()
}
