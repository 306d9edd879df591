package main

// This file is drm's use of its discovery cache (internal/cache): the
// facts of every DRM device, kept in drm.cache beside the store, and
// INFO's tally of them in the file's head (docs/performance.md#discovery-cache).

import (
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
