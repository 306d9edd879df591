package main

import (
	"fmt"

	"github.com/cdi-exec/plugins/internal/cache"
	"github.com/cdi-exec/plugins/internal/sysfs"
)

// factsVersion names the meaning of the cached facts; change it whenever
// scan learns something new or differently, so that older files are
// rebuilt.
const factsVersion = "drm facts 3"

// newCache returns the plugin's discovery cache for a host.
func newCache(stateDir string, h *sysfs.Host) cache.Cache {
	sys := h.Sys()
	return *cache.New(stateDir, name, factsVersion+"\x00"+h.Root, cache.Watch{
		Boot:   h.Proc("sys/kernel/random/boot_id"),
		Seqnum: sys + "/kernel/uevent_seqnum",
		Sys:    []string{sys + "/class/drm", sys + "/bus/pci/devices"},
		Dev:    []string{h.Dev("dri")},
		List:   h.List,
	})
}

// facts returns the facts of every DRM device: from the cache while it is
// fresh, else scanned and cached. full asks for PCI ids and NUMA nodes
// too; rescan ignores the cache (a device chosen from it failed its live
// check).
func (p *plugin) facts(full, rescan bool) ([]fact, error) {
	enc, err := p.encoded(full, rescan)
	if err != nil {
		return nil, err
	}
	facts, _, err := decodeFacts(enc)
	if err != nil && !rescan { // a cache that does not decode: read the host
		return p.facts(full, true)
	}
	return facts, err
}

// encoded is facts, encoded as the cache keeps them.
func (p *plugin) encoded(full, rescan bool) ([]byte, error) {
	var st *cache.Stamp
	if rescan {
		p.host.Forget() // read the host anew
		st = p.cache.Begin()
	} else {
		b, stamp := p.cache.Load()
		if len(b) > 0 && (b[0] == factsFull || !full) {
			return b, nil
		}
		if b != nil {
			stamp = p.cache.Begin()
		}
		st = stamp
	}
	_, enc, err := p.scan(st, full)
	return enc, err
}

// tally is INFO's summary of the facts, from the head of the cache file
// while it is fresh, else scanned and cached.
func (p *plugin) tally() (tally, error) {
	b, st := p.cache.Summary()
	if b != nil {
		if t, err := decodeTally(b); err == nil {
			return t, nil
		}
		st = p.cache.Begin() // a summary that does not decode: read the host
	}
	facts, _, err := p.scan(st, false)
	if err != nil {
		return tally{}, err
	}
	return tallyOf(facts), nil
}

// scan reads the facts from the host and caches them, with their tally,
// under st, a stamp taken before.
func (p *plugin) scan(st *cache.Stamp, full bool) ([]fact, []byte, error) {
	facts, err := scan(&p.host, full)
	if err != nil {
		return nil, nil, err
	}
	enc := encodeFacts(facts, full)
	_ = p.cache.Save(st, tallyOf(facts).encode(), enc) // a cache that cannot be written only costs time
	return facts, enc, nil
}

// liveGPU is the live check of a device about to be handed out:
// each of its nodes' class entry still leads to the device directory the
// facts name, and the node in /dev is the character device sysfs
// describes (under uevent's DEVNAME when it has one). It returns the
// nodes to hand out: the DRM nodes in want_device_nodes order, then, with
// companion_nodes "auto", the vendor's nodes (companion.go), the GPU's
// own before the shared ones.
// live is g's live check.
func (p *plugin) live(g gpu) *liveGPU { return &liveGPU{p: p, ft: g.fact, minors: g.minors} }

type liveGPU struct {
	p      *plugin
	ft     *fact
	minors []minor // the device's minors of the wanted kinds
}

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
