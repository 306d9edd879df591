package main

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/pkg/sysfs"
)

// fact is what discovery learns about one DRM device whatever the config
// says: the discovery cache keeps a list of them, and each config filters
// them in memory (judge).
type fact struct {
	// sys is the device directory as the host sees it, for example
	// "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0": the key of a
	// platform device, and the device's PCIe chain.
	sys    string
	flags  uint8
	vendor string // PCI ids in lower case ("0x10de"); "" when unreadable or not read
	device string
	numa   int // NUMA node, -1 when unknown or not read
	minors []minor
}

// Device facts.
const (
	isPCI  = 1 << iota // the directory is a PCI function: its name is the key
	gone               // the class link dangles: no device directory
	isVF               // an SR-IOV VF (it has a physfn link)
	hasVFs             // an SR-IOV PF with VFs enabled
)

// minor is one DRM node of a device.
type minor struct {
	kind  uint8 // kindPrimary, kindRender or kindControl
	index int   // the number in its name
	inDev bool  // /dev/dri has a character device of its name
}

// Minor kinds, in handout order.
const (
	kindPrimary = iota
	kindRender
	kindControl
)

var kindNames = [...]string{sysfs.Primary, sysfs.Render, sysfs.Control}
var kindPrefixes = [...]string{"card", "renderD", "controlD"}

func kindOf(name string) uint8 {
	switch name {
	case sysfs.Render:
		return kindRender
	case sysfs.Control:
		return kindControl
	}
	return kindPrimary
}

// name is the minor's node name, "card0" or "renderD128".
func (m minor) name() string { return kindPrefixes[m.kind] + strconv.Itoa(m.index) }

// key is the device's stable identity: its PCI address, or for a platform
// device its sysfs path.
func (f *fact) key() string {
	if f.flags&isPCI != 0 {
		return strings.ToLower(f.sys[strings.LastIndexByte(f.sys, '/')+1:])
	}
	return f.sys
}

// scan reads the facts of every DRM device from the host. Without full it
// leaves out the PCI ids and NUMA nodes, which only ADD, DEVICES and
// configs with id whitelists need: each costs a read per device.
func scan(h *sysfs.Host, full bool) ([]fact, error) {
	devs, err := h.DRMDevices()
	if err != nil {
		return nil, err
	}
	out := make([]fact, len(devs))
	for i, d := range devs {
		f := &out[i]
		f.sys, f.numa = h.SysPath(d.Dir), -1
		f.minors = make([]minor, len(d.Minors))
		for j, m := range d.Minors {
			f.minors[j] = minor{kind: kindOf(m.Kind), index: m.Index, inDev: h.NodeExists("dri/" + m.Name)}
		}
		_, pci := d.PCIAddr()
		if pci {
			f.flags |= isPCI
		}
		dir, err := sysfs.OpenDir(d.Dir)
		if err != nil {
			f.flags |= gone
			continue
		}
		if pci {
			f.readPCI(dir, full)
		}
		dir.Close()
	}
	return out, nil
}

// readPCI reads the SR-IOV state of a PCI function, and with full its ids
// and NUMA node.
func (f *fact) readPCI(dir *sysfs.Dir, full bool) {
	if dir.LinkBase("physfn") != "" {
		f.flags |= isVF
	}
	if n, _ := strconv.Atoi(lower(dir.Attr("sriov_numvfs"))); n > 0 {
		f.flags |= hasVFs
	}
	if full {
		f.vendor = lower(dir.Attr("vendor"))
		f.device = lower(dir.Attr("device"))
		f.numa = dir.NUMA()
	}
}

// The cache holds: a byte that says whether the facts are full, their
// count, then per device its sys path, flags, ids, NUMA node + 1 and
// minors (kind with the inDev bit, index).
const (
	factsFull = 1
	inDevBit  = 0x80
)

func encodeFacts(facts []fact, full bool) []byte {
	var b []byte
	if full {
		b = append(b, factsFull)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(facts)))
	for i := range facts {
		f := &facts[i]
		b = appendString(b, f.sys)
		b = append(b, f.flags)
		b = appendString(b, f.vendor)
		b = appendString(b, f.device)
		b = binary.AppendUvarint(b, uint64(f.numa+1))
		b = binary.AppendUvarint(b, uint64(len(f.minors)))
		for _, m := range f.minors {
			k := m.kind
			if m.inDev {
				k |= inDevBit
			}
			b = append(b, k)
			b = binary.AppendUvarint(b, uint64(m.index))
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errFacts = errors.New("malformed facts")

// decodeFacts reads what encodeFacts wrote. Every string is a substring of
// one copy of b, and every minor lives in one array: a handful of
// allocations however many devices there are.
func decodeFacts(b []byte) ([]fact, bool, error) {
	d := decoder{s: string(b)}
	full := d.byte() == factsFull
	n := d.count()
	facts := make([]fact, 0, n)
	var minors []minor
	for range n {
		f := fact{sys: d.string(), flags: d.byte(), vendor: d.string(), device: d.string(), numa: d.int() - 1}
		k := d.count()
		start := len(minors)
		for range k {
			kind := d.byte()
			minors = append(minors, minor{kind: kind &^ inDevBit, index: d.int(), inDev: kind&inDevBit != 0})
		}
		f.minors = minors[start:len(minors):len(minors)]
		if d.bad || f.sys == "" || f.numa < -1 {
			return nil, false, errFacts
		}
		for _, m := range f.minors {
			if m.kind > kindControl {
				return nil, false, errFacts
			}
		}
		facts = append(facts, f)
	}
	if d.bad || d.s != "" {
		return nil, false, errFacts
	}
	return facts, full, nil
}

// decoder reads the facts encoding; bad sticks once set.
type decoder struct {
	s   string
	bad bool
}

func (d *decoder) byte() uint8 {
	if d.s == "" {
		d.bad = true
		return 0
	}
	c := d.s[0]
	d.s = d.s[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c := d.byte()
		if d.bad {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	d.bad = true
	return 0
}

func (d *decoder) int() int {
	v := d.uvarint()
	if v > 1<<30 {
		d.bad = true
		return 0
	}
	return int(v)
}

// count reads a number of items, each at least one byte long.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.s)) {
		d.bad = true
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.count()
	if d.bad {
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}
