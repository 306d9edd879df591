package main

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/cdi-exec/plugins/internal/sysfs"
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
	numa   int // NUMA node (of the PCI function it is or hangs off), -1 when unknown or not read
	minors []minor
}

// Device facts.
const (
	isPCI    = 1 << iota // the directory is a PCI function: its name is the key
	gone                 // the class link dangles: no device directory
	isVF                 // an SR-IOV VF (it has a physfn link)
	hasVFs               // an SR-IOV PF with VFs enabled
	byAMD                // bound to amdgpu (read by a full scan)
	byNVIDIA             // bound to nvidia (read by a full scan)
	byVFIO               // bound to vfio-pci (read by a full scan)
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
func (f *fact) key() string { return keyOf(f.sys, f.flags) }

// keyOf is key for a device directory read as a string or in place. The
// kernel writes PCI addresses in lower case, which the check of a PCI
// address asks for, so the base name is the key as it is.
func keyOf[T text](sys T, flags uint8) T {
	if flags&isPCI == 0 {
		return sys
	}
	for i := len(sys) - 1; i >= 0; i-- {
		if sys[i] == '/' {
			return sys[i+1:]
		}
	}
	return sys
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
		} else if full {
			f.numa, _ = h.Place(f.sys) // the PCI function it hangs off, if any
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
		switch dir.LinkBase("driver") {
		case "amdgpu":
			f.flags |= byAMD
		case "nvidia":
			f.flags |= byNVIDIA
		case "vfio-pci":
			f.flags |= byVFIO
		}
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

// tally is the summary the cache keeps with the facts, for INFO under a
// config that filters by node kind only: the devices such a config would
// hand out, by the set of node kinds they have in /dev (bit 1<<kind). A
// config that wants some kinds counts every set that has all of them. It
// is as config-independent as the facts, and its size does not grow with
// them.
type tally [1 << 3]int

// tallyOf tallies facts. A device counts when an unfiltered config would
// hand it out (reason, as count applies it) given a wanted node.
func tallyOf(facts []fact) tally {
	var t tally
	for i := range facts {
		f := &facts[i]
		var kinds int
		for _, m := range f.minors {
			if m.inDev {
				kinds |= 1 << m.kind
			}
		}
		if kinds != 0 && reason(filter{}, f.flags, f.key(), f.vendor, f.device) == "" {
			t[kinds]++
		}
	}
	return t
}

// usable is how many devices a config wanting these node kinds would hand
// out.
func (t tally) usable(mask int) int {
	var n int
	for kinds, c := range t {
		if kinds&mask == mask {
			n += c
		}
	}
	return n
}

// The cache's summary is the tally: one uvarint per set of kinds.
func (t tally) encode() []byte {
	b := make([]byte, 0, 2*len(t))
	for _, c := range t {
		b = binary.AppendUvarint(b, uint64(c))
	}
	return b
}

func decodeTally(b []byte) (tally, error) {
	var t tally
	d := decoder{b: b}
	for i := range t {
		t[i] = d.int()
	}
	if d.bad || len(d.b) != 0 || t[0] != 0 {
		return tally{}, errFacts
	}
	return t, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errFacts = errors.New("malformed facts")

// decodeFacts reads what encodeFacts wrote. Every string is a substring of
// one copy of b, and every minor lives in one array: a handful of
// allocations however many devices there are.
func decodeFacts(b []byte) ([]fact, bool, error) {
	all := string(b)
	d := decoder{b: b}
	str := func() string {
		v := d.bytes()
		off := len(b) - len(d.b) - len(v)
		return all[off : off+len(v)]
	}
	full := d.byte() == factsFull
	n := d.count()
	facts := make([]fact, 0, n)
	minors := make([]minor, 0, 2*n) // most devices have a card and a render node
	for range n {
		f := fact{sys: str(), flags: d.byte(), vendor: str(), device: str(), numa: d.int() - 1}
		if f.sys == "" {
			d.bad = true
		}
		k := d.count()
		start := len(minors)
		for range k {
			minors = append(minors, d.minor())
		}
		f.minors = minors[start:len(minors):len(minors)]
		if d.bad {
			return nil, false, errFacts
		}
		facts = append(facts, f)
	}
	if d.bad || len(d.b) != 0 {
		return nil, false, errFacts
	}
	return facts, full, nil
}

// decoder reads the facts encoding in place; bad sticks once set.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) byte() uint8 {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
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
	if n > uint64(len(d.b)) {
		d.bad = true
		return 0
	}
	return int(n)
}

// bytes reads a string in place.
func (d *decoder) bytes() []byte {
	n := d.count()
	if d.bad {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) minor() minor {
	k := d.byte()
	m := minor{kind: k &^ inDevBit, index: d.int(), inDev: k&inDevBit != 0}
	if m.kind > kindControl {
		d.bad = true
		return minor{}
	}
	return m
}
