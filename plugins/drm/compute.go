package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
)

// Compute mode (want_device_nodes []): NVIDIA GPUs handed out without DRM
// nodes, as NVIDIA's own device plugin and DRA driver hand them out, so
// that a node without nvidia-drm (the usual cloud GPU node) has GPUs
// (docs/plugins.md#nvidia-compute-without-drm). The GPUs are those the
// NVIDIA driver lists in /proc/driver/nvidia/gpus; each is handed out as
// its /dev/nvidia<minor>, the minor read from its information file, then
// the driver's shared nodes (companion.go). The key is the PCI address, as
// for a GPU handed out through its DRM nodes, so both configs share one
// store (drm.db) and a GPU is held through one of them at a time.
//
// Compute mode reads the host on every command and keeps no discovery
// cache: one listing of /proc/driver/nvidia/gpus and, per GPU, its
// information file and its PCI function's attributes. A GPU node has at
// most a few dozen GPUs.

// nvidiaInfo is what a GPU's /proc/driver/nvidia/gpus/<addr>/information
// says.
type nvidiaInfo struct {
	minor int // -1 when the file has no valid Device Minor
	uuid  string
}

// parseNVIDIAInfo reads the "Device Minor:" and "GPU UUID:" lines of an
// NVIDIA information file; the first of each counts. A minor that is no
// number below 254 (the driver's own nodes take 254 and 255) is -1.
func parseNVIDIAInfo(b []byte) nvidiaInfo {
	in := nvidiaInfo{minor: -1}
	minorSeen := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "Device Minor":
			if minorSeen {
				continue
			}
			minorSeen = true
			if n, err := strconv.Atoi(val); err == nil && n >= 0 && n < nvidiaModesetMinor {
				in.minor = n
			}
		case "GPU UUID":
			in.uuid = val
		}
	}
	return in
}

// readNVIDIAInfo reads an NVIDIA GPU's information file.
func readNVIDIAInfo(h *sysfs.Host, addr string) (nvidiaInfo, error) {
	b, err := os.ReadFile(h.Proc("driver/nvidia/gpus/" + addr + "/information"))
	if err != nil {
		return nvidiaInfo{minor: -1}, err
	}
	return parseNVIDIAInfo(b), nil
}

// nvidiaUUID is the UUID of an NVIDIA GPU, "" when the driver does not
// say (DEVICES only).
func nvidiaUUID(h *sysfs.Host, addr string) string {
	in, _ := readNVIDIAInfo(h, addr)
	return in.uuid
}

// computeGPU is one GPU the NVIDIA driver lists, as a compute config sees
// it.
type computeGPU struct {
	fact   fact
	info   nvidiaInfo
	reason string // "" when usable
}

// node is the GPU's own node, "/dev/nvidia<minor>".
func (g *computeGPU) node() string { return "/dev/nvidia" + strconv.Itoa(g.info.minor) }

// nvidiaAddrs lists the PCI addresses the NVIDIA driver lists, sorted; none
// when the driver is not loaded.
func nvidiaAddrs(h *sysfs.Host) ([]string, error) {
	return pciAddrsIn(h, h.Proc("driver/nvidia/gpus"))
}

// pciAddrsIn lists the entries of dir named as PCI addresses, sorted: none
// when dir does not exist (the driver is not loaded).
func pciAddrsIn(h *sysfs.Host, dir string) ([]string, error) {
	var out []string
	err := h.List(dir, func(name []byte, _ uint64, _ uint8) {
		if request.IsPCIAddr(string(name)) {
			out = append(out, string(name))
		}
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// computeGPUs reads every GPU the NVIDIA driver lists, judged by the
// config, skipping those skip says (held by another request).
func (p *plugin) computeGPUs(skip func(key string) bool) ([]computeGPU, error) {
	addrs, err := nvidiaAddrs(&p.host)
	if err != nil {
		return nil, err
	}
	out := make([]computeGPU, 0, len(addrs))
	for _, addr := range addrs {
		if skip != nil && skip(addr) {
			continue
		}
		out = append(out, p.computeGPU(addr))
	}
	return out, nil
}

// computeGPU reads and judges one GPU.
func (p *plugin) computeGPU(addr string) computeGPU {
	g := computeGPU{fact: fact{flags: isPCI, numa: -1}, info: nvidiaInfo{minor: -1}}
	sys, err := p.host.Resolve(p.host.PCIDir(addr))
	if err != nil {
		g.fact.sys = "/sys/bus/pci/devices/" + addr
		g.fact.flags |= gone
		g.reason = "no PCI function " + addr + " in /sys/bus/pci/devices"
		return g
	}
	g.fact.sys = sys
	if dir, err := sysfs.OpenDir(p.host.Path(sys)); err == nil {
		g.fact.readPCI(dir, true)
		dir.Close()
	} else {
		g.fact.flags |= gone
	}
	if g.reason = p.filter.check(&g.fact, addr); g.reason != "" {
		return g
	}
	if g.fact.flags&byNVIDIA == 0 {
		g.reason = "not bound to the nvidia driver"
		return g
	}
	g.info, err = readNVIDIAInfo(&p.host, addr)
	switch {
	case err != nil:
		g.reason = fmt.Sprintf("reading /proc/driver/nvidia/gpus/%s/information: %v", addr, err)
	case g.info.minor < 0:
		g.reason = fmt.Sprintf("/proc/driver/nvidia/gpus/%s/information has no Device Minor", addr)
	case !p.host.NodeExists("nvidia" + strconv.Itoa(g.info.minor)):
		g.reason = g.node() + " missing from /dev"
	}
	return g
}

// computeDevice is the pool device of a usable GPU.
func (p *plugin) computeDevice(g *computeGPU) pool.Device {
	return pool.Device{Key: g.fact.key(), Index: g.info.minor, NUMA: g.fact.numa, Nodes: []string{g.node()},
		Live: &liveCompute{p: p, ft: &g.fact, node: g.node()}, Dir: p.host.Path(g.fact.sys)}
}

// discoverCompute is Discover in compute mode.
func (p *plugin) discoverCompute(scan pool.Scan) ([]pool.Device, error) {
	if scan.Rescan {
		p.host.Forget()
	}
	gpus, err := p.computeGPUs(scan.Skipped)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Device, 0, len(gpus))
	for i := range gpus {
		if gpus[i].reason == "" {
			out = append(out, p.computeDevice(&gpus[i]))
		}
	}
	return out, nil
}

// inventoryCompute is Inventory in compute mode: every GPU the NVIDIA
// driver lists, with its UUID.
func (p *plugin) inventoryCompute() ([]protocol.DeviceInfo, error) {
	gpus, err := p.computeGPUs(nil)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, len(gpus))
	for i := range gpus {
		g := &gpus[i]
		addr := g.fact.key()
		nodes := []string{}
		if g.reason == "" {
			var err error
			if nodes, err = p.computeDevice(g).Live.Resolve(); err != nil {
				g.reason, nodes = err.Error(), []string{}
			}
		}
		if g.info.uuid == "" {
			g.info.uuid = nvidiaUUID(&p.host, addr)
		}
		pcie := sysfs.ParsePCIe(g.fact.sys)
		out[i] = protocol.DeviceInfo{Key: addr, Nodes: nodes, NUMA: g.fact.numa, Usable: g.reason == "", Reason: g.reason,
			VendorID: g.fact.vendor, DeviceID: g.fact.device, UUID: g.info.uuid,
			PCIeRoot: pcie.Root, PCIeBridges: pcie.Bridges(addr), PCIeSwitch: pcie.Switch(addr)}
	}
	return out, nil
}

// liveCompute is the live check of a GPU handed out in compute mode: its
// PCI function is still bound to nvidia, the driver still gives it the
// minor, and its nodes (companions.of: its own, then the shared ones
// that exist) are the character devices the kernel describes.
type liveCompute struct {
	p    *plugin
	ft   *fact
	node string
}

// Resolve implements pool.Resolver.
func (g *liveCompute) Resolve() ([]string, error) {
	nodes, err := g.p.companions.of(g.ft)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 || nodes[0] != g.node {
		return nil, fmt.Errorf("%s is no longer the node of GPU %s", g.node, g.ft.key())
	}
	return nodes, nil
}
