package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// PCIe is where a device sits in the PCIe tree, read from its resolved
// sysfs path.
type PCIe struct {
	// Root is the root complex (host bridge) as the kernel names its
	// root bus: "pci0000:00". "" when the device is not below one.
	Root string
	// Path lists the PCI functions from the root port down to the device's
	// own function, or to the function it hangs off (a USB serial tty's
	// controller).
	Path []string
	// Dir is the sysfs path ("/sys/devices/...") of Path's last function.
	Dir string
}

// ParsePCIe reads a device's place from its resolved sysfs path
// ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/card0", without
// the host root). Root buses may sit below platform devices (ARM host
// bridges); a root bus nested behind a function (Intel VMD) continues the
// path. A device not below a root bus has the zero PCIe.
func ParsePCIe(sysPath string) PCIe {
	rest, ok := strings.CutPrefix(sysPath, "/sys/devices/")
	if !ok {
		return PCIe{}
	}
	var p PCIe
	end := len("/sys/devices")
	for part := range strings.SplitSeq(rest, "/") {
		switch {
		case p.Root == "" && isRootBus(part):
			p.Root = part
		case p.Root == "":
		case isFunction(part):
			p.Path = append(p.Path, part)
			p.Dir = sysPath[:end+1+len(part)]
		case !isRootBus(part):
			return p
		}
		end += 1 + len(part)
	}
	return p
}

// Chain is the device's root complex and path, as alloc.Candidate.PCIe
// wants it; nil when unknown.
func (p PCIe) Chain() []string {
	if p.Root == "" || len(p.Path) == 0 {
		return nil
	}
	return append([]string{p.Root}, p.Path...)
}

// Bridges is the path above the device: Path without its last function
// when that is the device itself (self is its PCI address).
func (p PCIe) Bridges(self string) []string {
	if n := len(p.Path); n > 0 && p.Path[n-1] == self {
		return p.Path[:n-1]
	}
	return p.Path
}

// Switch is the device's PCIe switch: the topmost bridge below its root
// port (a switch's upstream port), "" for a device on the root bus or on
// its root port's own link (self is its PCI address, as for Bridges).
func (p PCIe) Switch(self string) string {
	if b := p.Bridges(self); len(b) >= 2 {
		return b[1]
	}
	return ""
}

// Place reads where the device at a resolved sysfs path sits: the NUMA node
// of the PCI function it is or hangs off (-1 when unknown), and its PCIe
// place.
func (h *Host) Place(sysPath string) (int, PCIe) {
	p := ParsePCIe(sysPath)
	if p.Dir == "" {
		return -1, p
	}
	d, err := OpenDir(filepath.Join(h.Root, p.Dir))
	if err != nil {
		return -1, p
	}
	defer d.Close()
	return d.NUMA(), p
}

// isRootBus recognises a root bus directory: "pci" then a PCI domain (4 to
// 8 hex digits) and a bus (2 hex digits), "pci0000:00" or "pci10000:e0".
func isRootBus(s string) bool {
	rest, ok := strings.CutPrefix(s, "pci")
	dom, bus, ok2 := strings.Cut(rest, ":")
	return ok && ok2 && isHex(dom, 4, 8) && isHex(bus, 2, 2)
}

// isFunction recognises a PCI function directory: domain (4 to 8 hex
// digits), bus, device and function, "0000:03:00.0". IsPCIAddr is the
// stricter form used for keys.
func isFunction(s string) bool {
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !isHex(dom, 4, 8) || len(rest) != 7 || rest[2] != ':' || rest[5] != '.' {
		return false
	}
	return isHex(rest[:2], 2, 2) && isHex(rest[3:5], 2, 2) && rest[6] >= '0' && rest[6] <= '7'
}

func isHex(s string, lo, hi int) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ClassDevice resolves /sys/class/<class>/<name> to the device's sysfs
// path without the host root, "/sys/devices/...".
func (h *Host) ClassDevice(class, name string) (string, error) {
	return h.Resolve(h.Sys("class", class, name))
}

// Resolve turns a host path that links to a device (a class entry, a
// /sys/bus/*/devices entry) into the device's sysfs path without the host
// root, "/sys/devices/...": one readlink, as such links point straight
// into /sys/devices. An entry that is not a link (a hand-made tree) is
// resolved in full.
func (h *Host) Resolve(link string) (string, error) {
	target, err := os.Readlink(link)
	switch {
	case errors.Is(err, unix.EINVAL):
		target, err = filepath.EvalSymlinks(link)
	case err == nil && filepath.IsAbs(target):
		target = filepath.Join(h.Root, target)
	case err == nil:
		target = filepath.Join(filepath.Dir(link), target)
	}
	if err != nil {
		return "", err
	}
	return h.SysPath(target), nil
}
