package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/internal/cache"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "drm"

var about = skel.About{Name: name, Summary: "hands whole GPUs to containers as their DRM device nodes", New: newPlugin}

// args are the drm plugin's config args (docs/plugins.md).
type args struct {
	Mode              string   `json:"mode"`
	WantDeviceNodes   []string `json:"want_device_nodes"`
	VendorIDWhitelist []string `json:"vendorid_whitelist"`
	DeviceIDWhitelist []string `json:"deviceid_whitelist"`
	PCIAddresses      []string `json:"pci_addresses"`
	NUMAPolicy        string   `json:"numa_policy"`
	CompanionNodes    string   `json:"companion_nodes"`
	AllowNoIOMMU      bool     `json:"allow_noiommu"` // VFIO mode: vfio.go
}

// filter is the validated form of args.
type filter struct {
	want    []string        // node kinds, in handout order
	wants   [3]bool         // by minor kind
	vendors map[string]bool // lower-case "0x...."; nil for any
	devices map[string]bool
	addrs   map[string]bool // nil for any (VFs then excluded)
	// companions hands out each GPU's vendor nodes (companion_nodes "auto").
	companions bool
	// compute hands out NVIDIA GPUs without DRM nodes (mode
	// "nvidia-compute"): compute.go.
	compute bool
	// vfio, "vfio" or "iommufd" (the mode), hands out GPUs bound to
	// vfio-pci with their IOMMU group: vfio.go.
	vfio string
	// allowNoIOMMU hands out GPUs of no-IOMMU groups too (VFIO mode).
	allowNoIOMMU bool
}

// kindsOnly reports whether the filter picks devices by node kind alone
// (no id whitelist, no pci_addresses), so that the cache's tally answers
// INFO.
func (f filter) kindsOnly() bool { return f.vendors == nil && f.devices == nil && f.addrs == nil }

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
	p := makePlugin(c.Env.HostRoot, c.Env.StateDir, f)
	p.Pool = pool.Pool{Name: name, Spec: spec, Strict: strict, Shared: sharedNodes,
		Discoverer: p, Counter: p, Lister: p, Placer: p}
	return p, nil
}

// makePlugin makes the plugin of a host and a state directory, with the
// host and the cache inside it (why: docs/performance.md#allocations-page-faults-syscalls).
func makePlugin(root, stateDir string, f filter) *plugin {
	p := &plugin{host: sysfs.Host{Root: root}, filter: f}
	p.cache = newCache(stateDir, &p.host)
	p.companions.host = &p.host
	p.src = sourceOf(p)
	return p
}

// The drm plugin's modes (the mode arg, docs/plugins.md#drm): a GPU's
// DRM nodes (the default), an NVIDIA GPU's /dev/nvidia<minor> without
// DRM nodes (compute.go), or a GPU bound to vfio-pci by its IOMMU group,
// as its group node or its iommufd device nodes (vfio.go).
const (
	modeDRM     = "drm"
	modeCompute = "nvidia-compute"
	modeVFIO    = vfioGroup
	modeIOMMUFD = vfioIOMMUFD
)

// oldMode is the mode of a config without the mode arg, written when the
// shape of want_device_nodes chose it: [] NVIDIA compute, ["vfio"] or
// ["iommufd"] VFIO, anything else (omitted too) DRM. Each shape keeps its
// meaning; one that fits no mode is refused by validate, never read as
// another.
func oldMode(want []string) string {
	switch {
	case want == nil:
		return modeDRM
	case len(want) == 0:
		return modeCompute
	case len(want) == 1 && (want[0] == vfioGroup || want[0] == vfioIOMMUFD):
		return want[0]
	}
	return modeDRM
}

// wantNodes checks want_device_nodes against the mode and returns the DRM
// node kinds to hand out: under mode "drm" a non-empty list of distinct
// kinds (omitted: primary and render); under the other modes none, and
// the arg left out (or the old shape that meant the same mode).
func wantNodes(mode string, set bool, want []string) ([]string, error) {
	of := modeName(mode, set, want)
	misfit := func(why string, args ...any) error {
		return fmt.Errorf("want_device_nodes %q does not fit %s: %s", want, of, fmt.Sprintf(why, args...))
	}
	switch mode {
	case modeDRM:
		if want == nil {
			return []string{sysfs.Primary, sysfs.Render}, nil
		}
		if len(want) == 0 {
			return nil, misfit("name the DRM nodes to hand out (%q, %q, %q), or set mode %q for NVIDIA GPUs without them", sysfs.Primary, sysfs.Render, sysfs.Control, modeCompute)
		}
		for i, k := range want {
			switch k {
			case sysfs.Primary, sysfs.Render, sysfs.Control:
			case vfioGroup, vfioIOMMUFD:
				return nil, misfit("%q is no DRM node but a mode of its own: set mode %q and leave want_device_nodes out", k, k)
			default:
				return nil, misfit("unknown node type %q; want %q, %q or %q", k, sysfs.Primary, sysfs.Render, sysfs.Control)
			}
			if slices.Contains(want[:i], k) {
				return nil, fmt.Errorf("want_device_nodes: %q listed twice", k)
			}
		}
		return want, nil
	case modeCompute, modeVFIO, modeIOMMUFD:
		switch m := oldMode(want); {
		case want == nil || m == mode:
			return nil, nil
		case m != modeDRM:
			return nil, misfit("without mode it means mode %q; leave want_device_nodes out", m)
		}
		return nil, misfit("mode %q hands out no DRM nodes; leave want_device_nodes out", mode)
	}
	return nil, fmt.Errorf("mode: %q is none of %q, %q, %q, %q", mode, modeDRM, modeCompute, modeVFIO, modeIOMMUFD)
}

// modeName names a config's mode in an error: as set, or as read from
// want_device_nodes in a config without it.
func modeName(mode string, set bool, want []string) string {
	switch {
	case set:
		return fmt.Sprintf("mode %q", mode)
	case want == nil:
		return fmt.Sprintf("mode %q (the default)", mode)
	}
	return fmt.Sprintf("mode %q (mode left out, read from want_device_nodes)", mode)
}

func (a args) validate() (filter, bool, error) {
	var f filter
	mode := a.Mode
	if mode == "" {
		mode = oldMode(a.WantDeviceNodes)
	}
	want, err := wantNodes(mode, a.Mode != "", a.WantDeviceNodes)
	if err != nil {
		return f, false, err
	}
	f.want = want
	f.compute = mode == modeCompute
	if mode == modeVFIO || mode == modeIOMMUFD {
		f.vfio = mode
	}
	for _, k := range f.want {
		f.wants[kindOf(k)] = true
	}
	if err := a.validNoIOMMU(&f); err != nil {
		return f, false, err
	}
	switch a.CompanionNodes {
	case "", companionsAuto:
		f.companions = f.vfio == "" // a VM's GPU brings no host driver's nodes
	case companionsNone:
		if f.compute {
			return f, false, fmt.Errorf("%s with companion_nodes %q hands out nothing: that mode hands out NVIDIA GPUs by their /dev/nvidia<minor>, a companion node", modeName(mode, a.Mode != "", a.WantDeviceNodes), companionsNone)
		}
	default:
		return f, false, fmt.Errorf("companion_nodes: %q is neither %q nor %q", a.CompanionNodes, companionsAuto, companionsNone)
	}
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
	host       sysfs.Host
	filter     filter
	cache      cache.Cache
	companions companions
	// src lists and reads the GPUs of a mode without DRM nodes (source.go);
	// nil in mode "drm", whose GPUs come from the facts and their cache.
	src source
}

// Discover returns the usable devices, from the cache when it is fresh.
// Each carries a live check (liveGPU) for when it is handed out.
func (p *plugin) Discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	if p.src != nil {
		return p.discoverSource(scan)
	}
	facts, err := p.facts(true, scan.Rescan)
	if err != nil {
		return nil, err
	}
	// Sized once (why: docs/performance.md#allocations-page-faults-syscalls).
	out := make([]pool.Device, 0, len(facts))
	for i := range facts {
		ft := &facts[i]
		if scan.Skipped(ft.key()) {
			continue // another request holds it: nothing to build
		}
		g, ok := p.filter.judge(ft)
		if !ok || g.Reason != "" {
			continue
		}
		g.Device.Nodes = p.filter.nodes(g.minors)
		g.Device.Live = p.live(g)
		g.Device.Dir = p.host.Path(ft.sys)
		out = append(out, g.Device)
	}
	return out, nil
}

// Capacity answers INFO: the usable devices. A config that filters by
// node kind only reads them off the cache's tally; others count the facts;
// the compute and VFIO modes discover.
func (p *plugin) Capacity(ctx context.Context, c *skel.Call) (int, error) {
	if p.src != nil { // no cache: count what ADD would find
		devs, err := p.Discover(ctx, c, pool.Scan{})
		return len(devs), err
	}
	if p.filter.kindsOnly() {
		t, err := p.tally()
		return t.usable(p.filter.mask()), err
	}
	full := p.filter.vendors != nil || p.filter.devices != nil
	enc, err := p.encoded(full, false)
	if err != nil {
		return 0, err
	}
	n, err := count(enc, p.filter)
	if err != nil { // a cache that does not decode: read the host
		if enc, err = p.encoded(full, true); err != nil {
			return 0, err
		}
		n, err = count(enc, p.filter)
	}
	return n, err
}

func (p *plugin) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	if p.src != nil {
		return p.inventorySource()
	}
	facts, err := p.facts(true, false)
	if err != nil {
		return nil, err
	}
	gpus := judge(facts, p.filter)
	out := make([]protocol.DeviceInfo, len(gpus))
	for i, g := range gpus {
		var nodes []string
		if g.Reason == "" {
			var err error
			if nodes, err = p.live(g).Resolve(); err != nil {
				g.Reason = err.Error() // ADD would not hand it out
			}
		}
		if g.Reason != "" {
			all := allKinds.wanted(g.fact.minors) // what the device has, for people to see
			nodes = make([]string, len(all))
			for j, m := range all {
				nodes[j] = "/dev/dri/" + m.name()
			}
		}
		pcie := sysfs.ParsePCIe(g.fact.sys)
		out[i] = protocol.DeviceInfo{Key: g.Device.Key, Nodes: nodes, NUMA: g.fact.numa, Usable: g.Reason == "", Reason: g.Reason,
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(g.Device.Key), PCIeSwitch: pcie.Switch(g.Device.Key)}
		if g.fact.flags&isPCI != 0 {
			out[i].VendorID, out[i].DeviceID = g.fact.vendor, g.fact.device
		}
		if g.fact.flags&byNVIDIA != 0 {
			out[i].UUID = nvidiaUUID(&p.host, g.Device.Key)
		}
	}
	return append(out, p.withoutDRM(facts)...), nil
}

// withoutDRM lists the PCI display controllers that have no DRM device,
// as unusable with the reason: an NVIDIA GPU whose nvidia-drm module is
// not loaded is invisible to ADD, and the operator should see why. Only
// DEVICES reads this, never INFO or ADD.
func (p *plugin) withoutDRM(facts []fact) []protocol.DeviceInfo {
	addrs, err := p.host.PCIFunctions()
	if err != nil {
		return nil
	}
	seen := make(map[string]bool, len(facts))
	for i := range facts {
		seen[facts[i].key()] = true
	}
	var out []protocol.DeviceInfo
	for _, addr := range addrs {
		if seen[addr] || !request.IsPCIAddr(addr) {
			continue
		}
		dir, err := sysfs.OpenDir(p.host.PCIDir(addr))
		if err != nil {
			continue
		}
		if !strings.HasPrefix(lower(dir.Attr("class")), "0x03") {
			dir.Close()
			continue // not a display controller: nothing more to read
		}
		ft := fact{sys: addr, flags: isPCI}
		ft.readPCI(dir, true)
		dir.Close()
		why := p.filter.check(&ft, addr)
		if why == "" {
			why = noDRM(ft.flags)
		}
		sys, _ := p.host.Resolve(p.host.PCIDir(addr))
		pcie := sysfs.ParsePCIe(sys)
		var uuid string
		if ft.flags&byNVIDIA != 0 {
			uuid = nvidiaUUID(&p.host, addr)
		}
		out = append(out, protocol.DeviceInfo{Key: addr, Nodes: []string{}, NUMA: ft.numa, Reason: why, VendorID: ft.vendor, DeviceID: ft.device, UUID: uuid,
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(addr), PCIeSwitch: pcie.Switch(addr)})
	}
	return out
}

// noDRM says why a display controller has no DRM device.
func noDRM(flags uint8) string {
	if flags&byVFIO != 0 {
		return "no DRM device: bound to vfio-pci, for a VM; hand it out whole with a config like conf/examples/pgpu.d/pgpu.conf (mode \"vfio\")"
	}
	if flags&byNVIDIA != 0 {
		return "no DRM device: hand it out without DRM nodes with a config like conf/examples/compute.d/nvidia-compute.conf (mode \"nvidia-compute\"), or load the nvidia-drm module (modprobe nvidia-drm), which makes an NVIDIA GPU's DRM nodes"
	}
	return "no DRM device: its driver made no DRM nodes"
}

// Place is where a GPU sits: its NUMA node, from the facts, and its PCIe
// chain, parsed from the device directory the facts name.
func (p *plugin) Place(_ context.Context, _ *skel.Call, d pool.Device) (int, []string) {
	return d.NUMA, sysfs.ParsePCIe(p.host.SysPath(d.Dir)).Chain()
}
