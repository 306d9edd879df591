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
	"github.com/cdi-exec/plugins/pkg/request"
)

// Compute mode (mode "nvidia-compute"): NVIDIA GPUs handed out without DRM
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

// computeSource is the source of mode nvidia-compute: the GPUs the
// NVIDIA driver lists.
type computeSource struct{ p *plugin }

// nvidiaNode is the node of the GPU of an NVIDIA minor, "/dev/nvidia<minor>".
func nvidiaNode(minor int) string { return "/dev/nvidia" + strconv.Itoa(minor) }

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

// addrs implements source.
func (s computeSource) addrs() ([]string, error) { return nvidiaAddrs(&s.p.host) }

// uuid implements source: from the information file, read again when
// the GPU was judged before it was read.
func (s computeSource) uuid(c *candidate) string {
	if c.uuid != "" {
		return c.uuid
	}
	return nvidiaUUID(&s.p.host, c.fact.key())
}

// read implements source: one GPU the driver lists, preferred by its
// minor, handed out as its /dev/nvidia<minor>.
func (s computeSource) read(addr string, _ int) (candidate, bool) {
	p := s.p
	c := candidate{fact: fact{flags: isPCI, numa: -1}, index: -1}
	sys, err := p.host.Resolve(p.host.PCIDir(addr))
	if err != nil {
		c.fact.sys = "/sys/bus/pci/devices/" + addr
		c.fact.flags |= gone
		c.reason = "no PCI function " + addr + " in /sys/bus/pci/devices"
		return c, true
	}
	c.fact.sys = sys
	if dir, err := sysfs.OpenDir(p.host.Path(sys)); err == nil {
		c.fact.readPCI(dir, true)
		dir.Close()
	} else {
		c.fact.flags |= gone
	}
	if c.reason = p.filter.check(&c.fact, addr); c.reason != "" {
		return c, true
	}
	if c.fact.flags&byNVIDIA == 0 {
		c.reason = "not bound to the nvidia driver"
		return c, true
	}
	info, err := readNVIDIAInfo(&p.host, addr)
	c.uuid = info.uuid
	switch {
	case err != nil:
		c.reason = fmt.Sprintf("reading /proc/driver/nvidia/gpus/%s/information: %v", addr, err)
	case info.minor < 0:
		c.reason = fmt.Sprintf("/proc/driver/nvidia/gpus/%s/information has no Device Minor", addr)
	case !p.host.NodeExists("nvidia" + strconv.Itoa(info.minor)):
		c.reason = nvidiaNode(info.minor) + " missing from /dev"
	default:
		node := nvidiaNode(info.minor)
		c.index, c.nodes = info.minor, []string{node}
		c.live = &liveCompute{p: p, ft: c.fact, node: node}
	}
	return c, true
}

// liveCompute is the live check of a GPU handed out in compute mode: its
// PCI function is still bound to nvidia, the driver still gives it the
// minor, and its nodes (companions.of: its own, then the shared ones
// that exist) are the character devices the kernel describes.
type liveCompute struct {
	p    *plugin
	ft   fact
	node string
}

// Resolve implements pool.Resolver.
func (g *liveCompute) Resolve() ([]string, error) {
	nodes, err := g.p.companions.of(&g.ft)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 || nodes[0] != g.node {
		return nil, fmt.Errorf("%s is no longer the node of GPU %s", g.node, g.ft.key())
	}
	return nodes, nil
}
