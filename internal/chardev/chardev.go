// Package chardev is the engine of the plugins that hand out character
// device nodes (generic, generic-tty): it finds the nodes a list of rules
// selects under /dev and sysfs, makes them into units (a node, or the
// nodes of one USB device or PCI function), places each at the PCI
// function it is or hangs off, checks the chosen ones live, and answers
// pool's interfaces (Discoverer, Counter, Lister, Placer, Permitter), so
// that a plugin is its config parsing and a pool.Pool.
//
// The files follow the concerns: chardev.go (the rules and pool's
// interfaces), scan.go (nodes, units, keys, order).
package chardev

import (
	"context"
	"math"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// Groupings: what one unit holds.
const (
	GroupNode = "node" // each node a unit
	GroupUSB  = "usb"  // the nodes of one USB device
	GroupPCI  = "pci"  // the nodes of one PCI function
)

// Rule is one validated rule: what it selects, how its nodes make units
// and how often each unit may be handed out.
type Rule struct {
	// Paths are globs of nodes relative to /dev ("ttyUSB*", "net/tun").
	Paths []string
	// Class selects class devices, /sys/class/<Class>/<name>: those
	// whose names Names match (globs), or those of Family.
	Class string
	Names []string
	// Family, with Class, selects the names that are exactly Family and
	// a decimal number ("tty" takes tty13, not ttyS0): the tty preset.
	// Each device of a family is a unit of its own, keyed by its kernel
	// name and handed out in number order. Its discovery reads the class
	// listing and /dev's and nothing per device: uevent, the node's
	// device number and the class link are read for the devices chosen
	// and for DEVICES only. Names, USB and Group do not apply.
	Family string
	// Reserve keeps a family's lowest-numbered devices from being
	// handed out, in order: a device numbered below an entry's Below,
	// and kept by no earlier entry, is listed with that entry's Reason.
	Reserve []Reserve
	// Unplaced says a family's devices sit on no PCI function (virtual
	// consoles): their place is not read.
	Unplaced bool
	// USB keeps only nodes that hang off a USB device that matches it;
	// nil for no filter.
	USB *USB
	// Group is GroupNode, GroupUSB or GroupPCI.
	Group string
	// Shares is how many requests may hold a unit at once: at least 1,
	// or Unlimited.
	Shares int
	// Permissions are the CDI device-node permissions of the unit's
	// nodes ("rw"); "" for the runtime's default.
	Permissions string
}

// Unlimited as a rule's Shares lets any number of requests hold a unit
// at once. Its shares are store slots like any others, but only the held
// ones exist: discovery lists those the request holds and the free ones
// it can take (Discover), and INFO counts the unit as math.MaxInt32.
const Unlimited = -1

// MaxTake bounds how many free shares of a unit of Unlimited shares one
// ADD is offered: a request may hold at most that many of one unit,
// where a request of more would make discovery list, and the store
// record, shares without end.
const MaxTake = 1024

// Reserve keeps the devices of a family numbered below Below for the
// host, for the reason DEVICES gives.
type Reserve struct {
	Below  int
	Reason string
}

// USB is a rule's USB filter, compared with the USB device's idVendor,
// idProduct and serial attributes: ids lower case, "" for any; a nil
// Serial matches any.
type USB struct {
	Vendor, Product string
	Serial          *string
}

// noNode is why a family's device without a character device node under
// /dev is not handed out.
const noNode = "no /dev node (or not a character device)"

// Engine answers pool's interfaces for a list of rules, on one host, for
// one command.
type Engine struct {
	host    *sysfs.Host
	rules   []Rule
	permits bool // some rule has permissions
	// keys maps the keys of the units the last scan found to their rule,
	// for Permissions; kept only when permits.
	keys map[string]int
}

// New returns the engine of rules on the host below hostRoot.
func New(hostRoot string, rules []Rule) *Engine {
	e := &Engine{host: sysfs.NewHost(hostRoot), rules: rules}
	for _, r := range rules {
		e.permits = e.permits || r.Permissions != ""
	}
	return e
}

// Discover implements pool.Discoverer: a device per share of every usable
// unit; share i of unit u is store key pool.ShareKey(u.key, i). Shares
// held by other requests are left out before the unit's node is looked
// at; indices put share 0 of every unit before share 1 of any, so that
// requests spread over units before they share one. A unit of Unlimited
// shares lists the shares the request holds (scan.Own) and the first
// scan.Need free ones (at most MaxTake), scanning share 0, 1, 2, ...
func (e *Engine) Discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	units, err := e.scan()
	if err != nil {
		return nil, err
	}
	if e.permits {
		e.remember(units)
	}
	devs := make([]pool.Device, 0, len(units)) // sized once: see drm's discover
	for ui, u := range units {
		if !u.usable() {
			continue
		}
		r := &e.rules[u.rule]
		var nodes []string
		add := func(key string, s int) bool {
			if nodes == nil {
				if r.Family != "" && !e.host.NodeExists(u.nodes[0].devname) {
					return false
				}
				nodes = make([]string, len(u.nodes))
				for i, n := range u.nodes {
					nodes[i] = "/dev/" + n.devname
				}
			}
			devs = append(devs, pool.Device{Key: key, Index: s*len(units) + ui, NUMA: alloc.Unknown,
				Nodes: nodes, Live: live{e.host, u}})
			return true
		}
		if r.Shares == Unlimited {
			unlimited(u.key, scan, add)
			continue
		}
		for s := range r.Shares {
			key := pool.ShareKey(u.key, s)
			if scan.Skipped(key) {
				continue
			}
			if !add(key, s) {
				break
			}
		}
	}
	return devs, nil
}

// unlimited lists the shares of a unit of Unlimited shares that an ADD
// can use (Discover): those the request holds, then the first free ones,
// as many as it can take. Nothing else of the unit is read, so a unit
// costs one index lookup per share scanned, whatever the number held.
func unlimited(unit string, scan pool.Scan, add func(key string, s int) bool) {
	for _, key := range scan.Own {
		if u, s := pool.ShareOf(key); u == unit {
			add(key, s)
		}
	}
	want := min(scan.Need, MaxTake)
	for s, free := 0, 0; free < want; s++ {
		key := pool.ShareKey(unit, s)
		if scan.Held(key) { // by another request, or by this one (Own)
			continue
		}
		add(key, s)
		free++
	}
}

// Capacity implements pool.Counter: the shares of the usable units, as
// Discover would list them free, a unit of Unlimited shares counting
// math.MaxInt32, and the sum never more (INFO's count is a 32-bit
// integer).
func (e *Engine) Capacity(context.Context, *skel.Call) (int, error) {
	units, err := e.scan()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range units {
		if !u.usable() {
			continue
		}
		r := &e.rules[u.rule]
		if r.Family != "" && !e.host.NodeExists(u.nodes[0].devname) {
			continue
		}
		shares := r.Shares
		if shares == Unlimited {
			shares = math.MaxInt32
		}
		n = min(n+shares, math.MaxInt32)
	}
	return n, nil
}

// remember keeps the rule of each unit found, for Permissions.
func (e *Engine) remember(units []*unit) {
	e.keys = make(map[string]int, len(units))
	for _, u := range units {
		e.keys[u.key] = u.rule
	}
}

// Permissions implements pool.Permitter: the rule's permissions for
// every share of a unit the last Discover found.
func (e *Engine) Permissions(key string) string {
	if i, ok := e.keys[pool.Unit(key)]; ok {
		return e.rules[i].Permissions
	}
	return ""
}

// Place implements pool.Placer: the NUMA node and PCIe place of the PCI
// function the device's unit is or hangs off (a USB device's controller).
func (e *Engine) Place(_ context.Context, _ *skel.Call, d pool.Device) (int, []string) {
	l, ok := d.Live.(live)
	if !ok {
		return alloc.Unknown, nil
	}
	numa, pcie := e.locate(l.u)
	return numa, pcie.Chain()
}

// locate reads where a unit sits. A family's device is placed through its
// class link (one readlink, then numa_node of its PCI function), unless
// its rule says it sits on none; a unit of another rule has its sysfs
// path from discovery. A unit on no PCI function is unknown.
func (e *Engine) locate(u *unit) (int, sysfs.PCIe) {
	sys := u.sys
	if r := &e.rules[u.rule]; r.Family != "" {
		if r.Unplaced {
			return alloc.Unknown, sysfs.PCIe{}
		}
		var err error
		if sys, err = e.host.ClassDevice(r.Class, u.nodes[0].name); err != nil {
			return alloc.Unknown, sysfs.PCIe{}
		}
	}
	if sys == "" {
		return alloc.Unknown, sysfs.PCIe{}
	}
	return e.host.Place(sys)
}

// Inventory implements pool.Lister: every unit the rules select, usable
// or not, with its attributes.
func (e *Engine) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	units, err := e.scan()
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, 0, len(units))
	for _, u := range units {
		if e.rules[u.rule].Family != "" {
			out = append(out, e.familyInfo(u))
			continue
		}
		out = append(out, e.info(u))
	}
	return out, nil
}

// familyInfo is what DEVICES says of a family's device: its node, its
// place, and why it is not handed out; its node is checked as ADD would.
func (e *Engine) familyInfo(u *unit) protocol.DeviceInfo {
	n := u.nodes[0]
	d := protocol.DeviceInfo{Key: u.key, Nodes: []string{"/dev/" + n.devname}}
	var pcie sysfs.PCIe
	d.NUMA, pcie = e.locate(u)
	d.PCIeRoot, d.PCIeBridges = pcie.Root, pcie.Bridges("")
	switch {
	case u.reason != "":
		d.Reason = u.reason
	case !e.host.NodeExists(n.devname):
		d.Reason = noNode
	default:
		node, err := e.host.ResolveNode(n.sysDir(e.host), n.devname)
		if err != nil {
			d.Reason = err.Error()
			break
		}
		d.Usable = true
		d.Nodes = []string{node}
	}
	return d
}

// info is what DEVICES says of a unit of a path or class rule.
func (e *Engine) info(u *unit) protocol.DeviceInfo {
	d := protocol.DeviceInfo{Key: u.key, Nodes: make([]string, len(u.nodes)), NUMA: alloc.Unknown,
		Usable: u.usable(), Reason: u.reason, PCIAddress: u.pci}
	for i, n := range u.nodes {
		d.Nodes[i] = "/dev/" + n.devname
	}
	switch shares := e.rules[u.rule].Shares; {
	case shares == Unlimited:
		d.Unlimited = true
	case shares > 1:
		d.Shares = shares
	}
	first := u.nodes[0]
	d.Class = first.class
	if first.sys != "" {
		d.Driver = e.host.DriverOf(first.sys)
		var pcie sysfs.PCIe
		d.NUMA, pcie = e.host.Place(u.sys)
		d.PCIeRoot, d.PCIeBridges, d.PCIeSwitch = pcie.Root, pcie.Bridges(u.pci), pcie.Switch(u.pci)
	}
	if u.usb != nil {
		d.USBVendor, d.USBProduct, d.USBSerial = u.usb.Vendor, u.usb.Product, u.usb.Serial
	}
	return d
}

// live is the live check of a unit about to be handed out: each node is
// the character device sysfs describes, under the name uevent gives now.
// It carries the unit, for Place.
type live struct {
	host *sysfs.Host
	u    *unit
}

// Resolve implements pool.Resolver.
func (l live) Resolve() ([]string, error) {
	out := make([]string, len(l.u.nodes))
	for i, n := range l.u.nodes {
		path, err := l.host.ResolveNode(n.sysDir(l.host), n.devname)
		if err != nil {
			return nil, err
		}
		out[i] = path
	}
	return out, nil
}
