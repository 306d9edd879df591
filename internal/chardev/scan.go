package chardev

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/request"
)

// node is one device node a rule selected.
type node struct {
	devname string // relative to /dev: "ttyUSB0", "net/tun", "accel/accel0"
	name    string // the kernel's name of the device: "ttyUSB0", "tun"
	sys     string // the class device's sysfs path, without the root; "" when unknown
	class   string // its class ("tty", "misc"); "" when unknown
	index   int    // its number in its family, for a family rule
	reason  string // why it cannot be handed out; "" when it can
}

// sysDir is the host path of the node's sysfs device directory: the one
// discovery resolved, else (a family's device) its class entry.
func (n node) sysDir(h *sysfs.Host) string {
	if n.sys == "" {
		return h.Sys("class", n.class, n.name)
	}
	return h.Path(n.sys)
}

// unit is what a request holds: the nodes of one device (or one node).
type unit struct {
	key    string
	rule   int
	nodes  []node
	usb    *sysfs.USB
	pci    string // the PCI function it is or hangs off; "" for none
	sys    string // the sysfs path its place is read from; "" for a family's device
	reason string // why it cannot be handed out; "" when it can
}

// usable reports whether the unit may be handed out: every node of a
// path or class rule passed its check; a family's device is not
// reserved (its node is looked at by Discover and Inventory).
func (u *unit) usable() bool { return u.reason == "" }

// scan finds the units the rules select on the host, in handout order:
// by rule, then by their first node's name, numbers compared as numbers
// (a family's by number). Nodes the USB filter leaves out are not units
// at all.
func (e *Engine) scan() ([]*unit, error) {
	// taken holds the devnames selected, by the first rule that selected
	// them. A family rule alone needs none: its names come from one
	// directory listing, each once.
	var taken map[string]bool
	if len(e.rules) != 1 || e.rules[0].Family == "" {
		taken = map[string]bool{}
	}
	var units, grouped []*unit
	for i, r := range e.rules {
		var nodes []node
		var err error
		if r.Family != "" {
			nodes, err = e.familyNodes(r)
		} else {
			nodes, err = e.selectNodes(r)
		}
		if err != nil {
			return nil, err
		}
		if taken != nil {
			nodes = slices.DeleteFunc(nodes, func(n node) bool {
				if taken[n.devname] {
					return true
				}
				taken[n.devname] = true
				return false
			})
		}
		if r.Family != "" {
			units = append(units, familyUnits(i, nodes)...)
			continue
		}
		g := e.group(i, r, nodes)
		units, grouped = append(units, g...), append(grouped, g...)
	}
	assignKeys(grouped)
	return units, nil
}

// familyNodes lists the class devices of a rule's family, in number
// order, each with the reason a Reserve gives; it reads the class
// listing and nothing else.
func (e *Engine) familyNodes(r Rule) ([]node, error) {
	var out []node
	err := e.host.List(e.host.Sys("class", r.Class), func(b []byte, _ uint64, _ uint8) {
		if !strings.HasPrefix(string(b), r.Family) {
			return
		}
		name := string(b)
		i, ok := sysfs.Index(name, r.Family)
		if !ok {
			return
		}
		n := node{devname: name, name: name, class: r.Class, index: i}
		for _, res := range r.Reserve {
			if i < res.Below {
				n.reason = res.Reason
				break
			}
		}
		out = append(out, n)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no such class on this host: nothing selected
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b node) int { return a.index - b.index })
	return out, nil
}

// familyUnits makes each device of a family a unit of its own, keyed by
// its kernel name.
func familyUnits(ruleIdx int, nodes []node) []*unit {
	units := make([]*unit, len(nodes))
	backing := make([]unit, len(nodes)) // one allocation for all
	for i, n := range nodes {
		backing[i] = unit{key: n.name, rule: ruleIdx, nodes: nodes[i : i+1 : i+1], reason: n.reason}
		units[i] = &backing[i]
	}
	return units
}

// selectNodes lists the nodes a rule selects, with the USB filter applied.
func (e *Engine) selectNodes(r Rule) ([]node, error) {
	var nodes []node
	var err error
	if r.Class != "" {
		nodes, err = e.classNodes(r)
	} else {
		nodes, err = e.pathNodes(r)
	}
	if err != nil || r.USB == nil {
		return nodes, err
	}
	return slices.DeleteFunc(nodes, func(n node) bool {
		u, ok := e.usbOf(n.sys)
		return !ok || !matchUSB(r.USB, u)
	}), nil
}

func matchUSB(f *USB, u sysfs.USB) bool {
	return (f.Vendor == "" || strings.EqualFold(u.Vendor, f.Vendor)) &&
		(f.Product == "" || strings.EqualFold(u.Product, f.Product)) &&
		(f.Serial == nil || u.Serial == *f.Serial)
}

// usbOf is the USB device a node hangs off, read once per command.
func (e *Engine) usbOf(sys string) (sysfs.USB, bool) {
	if sys == "" {
		return sysfs.USB{}, false
	}
	return e.host.USBOf(sys)
}

// pathNodes lists the nodes the rule's globs match under /dev, each with
// the device sysfs gives for its number (/sys/dev/char).
func (e *Engine) pathNodes(r Rule) ([]node, error) {
	var out []node
	seen := map[string]bool{}
	for _, g := range r.Paths {
		matches, err := filepath.Glob(e.host.Dev(g))
		if err != nil {
			return nil, fmt.Errorf("glob /dev/%s: %w", g, err)
		}
		for _, m := range matches {
			rel, err := filepath.Rel(e.host.Dev(""), m)
			if err != nil || seen[rel] || strings.HasPrefix(rel, "..") {
				continue
			}
			seen[rel] = true
			out = append(out, e.pathNode(rel))
		}
	}
	return out, nil
}

// pathNode reads one node of a path rule.
func (e *Engine) pathNode(devname string) node {
	n := node{devname: devname, name: path.Base(devname)}
	var st unix.Stat_t
	if err := unix.Lstat(e.host.Dev(devname), &st); err != nil {
		n.reason = fmt.Sprintf("/dev/%s: %v", devname, err)
		return n
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
	case unix.S_IFLNK:
		n.reason = "a symbolic link; select the node it points to"
		return n
	case unix.S_IFDIR:
		n.reason = "a directory"
		return n
	default:
		n.reason = "not a character device"
		return n
	}
	sys, err := e.host.CharDevice(unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if err != nil {
		n.reason = fmt.Sprintf("sysfs has no device %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		return n
	}
	n.sys, n.name = sys, path.Base(sys)
	n.class = e.host.SubsystemOf(sys)
	n.reason = e.check(n)
	return n
}

// classNodes lists the class devices whose names the rule's globs match,
// with their nodes as uevent names them.
func (e *Engine) classNodes(r Rule) ([]node, error) {
	var names []string
	err := e.host.List(e.host.Sys("class", r.Class), func(b []byte, _ uint64, _ uint8) {
		name := string(b)
		if name == "." || name == ".." {
			return
		}
		for _, g := range r.Names {
			if ok, _ := path.Match(g, name); ok {
				names = append(names, name)
				return
			}
		}
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no such class on this host: nothing selected
	}
	if err != nil {
		return nil, err
	}
	out := make([]node, 0, len(names))
	for _, name := range names {
		n := node{devname: name, name: name, class: r.Class}
		sys, err := e.host.ClassDevice(r.Class, name)
		if err != nil {
			n.reason = fmt.Sprintf("/sys/class/%s/%s: %v", r.Class, name, err)
			out = append(out, n)
			continue
		}
		n.sys = sys
		if u, err := sysfs.ReadUevent(filepath.Join(e.host.Root, sys)); err == nil && u.DevName != "" {
			n.devname = u.DevName
		}
		n.reason = e.check(n)
		out = append(out, n)
	}
	return out, nil
}

// check is the live check of a node: a character device with the number
// sysfs gives; it returns why not, "" when it passes.
func (e *Engine) check(n node) string {
	if _, err := e.host.ResolveNode(filepath.Join(e.host.Root, n.sys), n.devname); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "no /dev/" + n.devname
		}
		return err.Error()
	}
	return ""
}

// group makes a rule's nodes into units: one per node, or one per USB
// device or PCI function (a node on neither is a unit of its own).
func (e *Engine) group(ruleIdx int, r Rule, nodes []node) []*unit {
	slices.SortFunc(nodes, func(a, b node) int { return natCompare(a.devname, b.devname) })
	var units []*unit
	byDev := map[string]*unit{}
	for _, n := range nodes {
		u := &unit{rule: ruleIdx, nodes: []node{n}, sys: n.sys}
		if usb, ok := e.usbOf(n.sys); ok {
			u.usb = &usb
		}
		if pc := sysfs.ParsePCIe(n.sys); len(pc.Path) > 0 {
			u.pci = pc.Path[len(pc.Path)-1]
		}
		var dev string
		switch {
		case r.Group == GroupUSB && u.usb != nil:
			dev = u.usb.Dir
		case r.Group == GroupPCI && u.pci != "":
			dev = u.pci
		}
		if g, ok := byDev[dev]; ok && dev != "" {
			g.nodes = append(g.nodes, n)
			continue
		}
		if dev != "" {
			byDev[dev] = u
		}
		units = append(units, u)
	}
	for _, u := range units {
		u.key = u.baseKey(r.Group)
		for _, n := range u.nodes {
			if n.reason != "" {
				u.reason = "/dev/" + n.devname + ": " + n.reason
				break
			}
		}
	}
	return units
}

// baseKey is the unit's identity before duplicates are told apart: the
// USB device's vendor:product:serial (or its port path without a serial),
// else the PCI function's address, else the node's kernel name. A unit
// of one node of a USB device or PCI function takes the device's identity
// too, so that a replugged adapter keeps its key (assignKeys numbers the
// nodes of one device).
func (u *unit) baseKey(group string) string {
	switch {
	case u.usb != nil && group != GroupPCI:
		id := u.usb.Serial
		if id == "" {
			id = "port-" + u.usb.Port
		}
		return keySafe(u.usb.Vendor + ":" + u.usb.Product + ":" + id)
	case u.pci != "":
		return u.pci
	}
	return keySafe(u.nodes[0].name)
}

// assignKeys makes the units' keys unique: units that share one (the
// three ttyUSB nodes of a modem, each its own unit) get "-0", "-1", ...
// in their order, which follows their node names. A family's devices are
// not given: they keep their kernel names, which the kernel makes unique
// (no config mixes a family with other rules).
func assignKeys(units []*unit) {
	count := map[string]int{}
	for _, u := range units {
		count[u.key]++
	}
	next := map[string]int{}
	for _, u := range units {
		if count[u.key] > 1 {
			k := u.key
			u.key = keySafe(fmt.Sprintf("%s-%d", k, next[k]))
			next[k]++
		}
	}
}

// keySafe makes s a device key (docs/protocol.md#extension-pinned-add):
// characters outside the key grammar become "_", and it is cut to 64.
func keySafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == ':' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 || request.ValidDeviceKey(string(b)) != nil {
		return "_"
	}
	return string(b)
}

// natCompare orders names with their numbers compared as numbers:
// ttyUSB2 before ttyUSB10.
func natCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

// digits counts the decimal digits s starts with.
func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
