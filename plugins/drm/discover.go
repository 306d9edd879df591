package main

import (
	"slices"
	"strings"

	"github.com/cdi-exec/plugins/pkg/pool"
)

// gpu is one DRM device as a config sees it: the device it would hand
// out, or the reason it will not.
type gpu struct {
	Device pool.Device
	Reason string // "" when usable
	fact   *fact
	minors []minor // the device's minors of the wanted kinds, in handout order
}

// judge applies the config to the facts: every device with a DRM node, in
// preference order, each usable (with its nodes) or with the reason it is
// not. It reads nothing from the host.
func judge(facts []fact, f filter) []gpu {
	out := make([]gpu, 0, len(facts))
	for i := range facts {
		if g, ok := f.judge(&facts[i]); ok {
			if g.Reason == "" {
				g.Device.Nodes = f.nodes(g.minors)
			}
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b gpu) int { return a.Device.Index - b.Device.Index })
	return out
}

// judge judges one device; false when it has no DRM node at all. A device
// is usable only with a node of every wanted kind in /dev, so a display
// adapter without a render node (a BMC's) is no GPU to the default config.
// The device's nodes are left for the caller to build.
func (f filter) judge(ft *fact) (gpu, bool) {
	if len(ft.minors) == 0 {
		return gpu{}, false
	}
	minors := f.wanted(ft.minors)
	first := minors
	if len(first) == 0 {
		first = allKinds.wanted(ft.minors)
	}
	g := gpu{Device: pool.Device{Key: ft.key(), Index: order(first), NUMA: ft.numa}, fact: ft, minors: minors}
	g.Reason = f.check(ft, g.Device.Key)
	if g.Reason == "" {
		g.Reason = f.missing(ft.minors)
	}
	return g, true
}

// allKinds wants every kind of node, in handout order.
var allKinds = filter{wants: [3]bool{true, true, true}}

// missing says which wanted node the device lacks, in the config's order;
// "" when it has one of each kind in /dev.
func (f filter) missing(minors []minor) string {
	for _, kind := range f.want {
		k := kindOf(kind)
		has, inDev := false, false
		for _, m := range minors {
			if m.kind == k {
				has, inDev = true, inDev || m.inDev
			}
		}
		switch {
		case !has && k == kindRender:
			return "no render node: a display-only adapter"
		case !has:
			return "no " + kind + " node"
		case !inDev:
			return "wanted device node missing from /dev"
		}
	}
	return ""
}

// mask is the set of wanted kinds, bit 1<<kind.
func (f filter) mask() int {
	var mask int
	for k, w := range f.wants {
		if w {
			mask |= 1 << k
		}
	}
	return mask
}

// count is judge for INFO: how many devices the encoded facts (the cache)
// hold that the config would hand out. It reads them in place, building
// nothing: on a large host this is most of INFO's work.
func count(enc []byte, f filter) (int, error) {
	d := decoder{b: enc}
	d.byte() // full or not: INFO needs no more than the scan always reads
	n, usable, mask := d.count(), 0, f.mask()
	for range n {
		sys, flags, vendor, device := d.bytes(), d.byte(), d.bytes(), d.bytes()
		d.int() // NUMA node
		if len(sys) == 0 {
			d.bad = true
		}
		kinds := 0 // the kinds of node in /dev
		for range d.count() {
			if m := d.minor(); m.inDev {
				kinds |= 1 << m.kind
			}
		}
		if d.bad {
			return 0, errFacts
		}
		if kinds&mask == mask && reason(f, flags, keyOf(sys, flags), vendor, device) == "" {
			usable++
		}
	}
	if d.bad || len(d.b) != 0 {
		return 0, errFacts
	}
	return usable, nil
}

// check returns why the config will not hand the device out, or "" (its
// nodes aside).
func (f filter) check(ft *fact, key string) string {
	return reason(f, ft.flags, key, ft.vendor, ft.device)
}

// text is what facts are read as: strings once decoded, bytes in place.
type text interface{ ~string | ~[]byte }

// reason is the rule behind check and count. The order of the tests
// decides the reason given.
func reason[T text](f filter, flags uint8, key, vendor, device T) string {
	pci := flags&isPCI != 0
	switch {
	case f.addrs != nil && !f.addrs[string(key)]:
		return "not in pci_addresses"
	case !pci && (f.vendors != nil || f.devices != nil):
		return "not a PCI device (id whitelist set)"
	case flags&gone != 0:
		return "device directory missing (dangling class link)"
	case !pci:
		return ""
	case f.vendors != nil && !f.vendors[string(vendor)]:
		return "vendor not in vendorid_whitelist"
	case f.devices != nil && !f.devices[string(device)]:
		return "device not in deviceid_whitelist"
	case f.addrs == nil && flags&isVF != 0:
		return "SR-IOV VF (handed out only when pci_addresses names it)"
	case flags&hasVFs != 0:
		return "SR-IOV PF with active VFs"
	}
	return ""
}

// wanted returns the device's minors of the wanted kinds, ordered by kind
// (primary, render, control) and number.
func (f filter) wanted(all []minor) []minor {
	return f.appendWanted(nil, all)
}

func (f filter) appendWanted(dst []minor, all []minor) []minor {
	for _, m := range all {
		if f.wants[m.kind] {
			dst = append(dst, m)
		}
	}
	slices.SortFunc(dst, func(a, b minor) int {
		if d := int(a.kind) - int(b.kind); d != 0 {
			return d
		}
		return a.index - b.index
	})
	return dst
}

// nodes returns, for each wanted kind in the config's order, the first
// minor of that kind with a node in /dev; nil when there is none.
func (f filter) nodes(minors []minor) []string {
	var out []string
	for _, kind := range f.want {
		k := kindOf(kind)
		for _, m := range minors {
			if m.kind == k && m.inDev {
				out = append(out, "/dev/dri/"+m.name())
				break
			}
		}
	}
	return out
}

// order is the device's preference index: its primary node's number, or
// for a device without one, its lowest other node number offset past any
// card number.
func order(minors []minor) int {
	if minors[0].kind == kindPrimary {
		return minors[0].index
	}
	return 1<<20 + minors[0].index
}

// lower returns an attribute in lower case; "" when it was unreadable.
func lower(v string, err error) string {
	if err != nil {
		return ""
	}
	return strings.ToLower(v)
}
