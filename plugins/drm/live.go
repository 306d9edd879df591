package main

import (
	"fmt"

	"github.com/cdi-exec/plugins/internal/sysfs"
)

// liveGPU is the live check of a device about to be handed out:
// each of its nodes' class entry still leads to the device directory the
// facts name, and the node in /dev is the character device sysfs
// describes (under uevent's DEVNAME when it has one). It returns the
// nodes to hand out: the DRM nodes in want_device_nodes order, then, with
// companion_nodes "auto", the vendor's nodes (companion.go), the GPU's
// own before the shared ones. The facts it checks come from the discovery
// cache (cache.go).
type liveGPU struct {
	p      *plugin
	ft     *fact
	minors []minor // the device's minors of the wanted kinds
}

// live is g's live check.
func (p *plugin) live(g gpu) *liveGPU { return &liveGPU{p: p, ft: g.fact, minors: g.minors} }

// Resolve implements pool.Resolver.
func (g *liveGPU) Resolve() ([]string, error) {
	p := g.p
	h := &p.host
	dir := h.Path(g.ft.sys)
	var nodes []string
	for _, kind := range p.filter.want {
		k := kindOf(kind)
		for _, m := range g.minors {
			if m.kind != k || !m.inDev {
				continue
			}
			node, err := liveNode(h, dir, m.name())
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, node)
			break
		}
	}
	if !p.filter.companions {
		return nodes, nil
	}
	more, err := p.companions.of(g.ft)
	if err != nil {
		return nil, err
	}
	return append(nodes, more...), nil
}

// liveNode checks one minor of the device directory dir.
func liveNode(h *sysfs.Host, dir, name string) (string, error) {
	got, err := h.DRMMinorDevice(name)
	if err != nil {
		return "", err
	}
	if got != dir {
		return "", fmt.Errorf("/sys/class/drm/%s now belongs to %s, not %s", name, h.SysPath(got), h.SysPath(dir))
	}
	return h.ResolveNode(dir+"/drm/"+name, "dri/"+name)
}
