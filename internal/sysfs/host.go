// Package sysfs reads the host's /sys and /dev under an injected root
// (CDI_HOST_ROOT), so that plugins run unchanged against the real host, a
// host mounted into a container, or a fixture tree in tests.
//
// It reads only the few files a command needs; nothing here parses pci.ids.
package sysfs

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/dirent"
)

// Host is a view of a machine's /sys and /dev below Root. It remembers the
// directories it has listed, so it is meant to live for one command (or
// until Forget).
type Host struct {
	Root   string // "/" on a real host
	dirs   map[string]map[string]bool
	listed map[string][]byte // raw getdents64 records, by path
}

// NewHost returns a view of the host below root.
func NewHost(root string) *Host {
	return &Host{Root: root}
}

// List calls fn for every entry of dir as dirent.List does, reading the
// directory once per Host: later calls replay the first listing, so that
// whoever looks at a directory during one command (discovery, and the
// discovery cache's stamp of the same moment) sees the same entries.
func (h *Host) List(dir string, fn func(name []byte, ino uint64, typ uint8)) error {
	recs, ok := h.listed[dir]
	if !ok {
		var err error
		if recs, err = dirent.Read(dir); err != nil {
			return err
		}
		if h.listed == nil {
			h.listed = map[string][]byte{}
		}
		h.listed[dir] = recs
	}
	dirent.Each(recs, fn)
	return nil
}

// Forget drops what the Host has listed, so that the next look reads the
// host again.
func (h *Host) Forget() {
	h.dirs, h.listed = nil, nil
}

// Sys returns the host path of a sysfs path given relative to /sys.
func (h *Host) Sys(rel ...string) string {
	return filepath.Join(append([]string{h.Root, "sys"}, rel...)...)
}

// Proc returns the host path of a procfs path given relative to /proc.
func (h *Host) Proc(rel string) string {
	return filepath.Join(h.Root, "proc", rel)
}

// Path returns the host path of a path as the host sees it ("/sys/...").
func (h *Host) Path(p string) string {
	return filepath.Join(h.Root, p)
}

// Dev returns the host path of a /dev entry given relative to /dev.
func (h *Host) Dev(rel string) string {
	return filepath.Join(h.Root, "dev", rel)
}

// ReadAttr reads a sysfs attribute and trims the trailing newline.
func ReadAttr(p string) (string, error) {
	b, err := readFile(p)
	if err != nil {
		return "", err
	}
	return trim(b), nil
}

// Uevent is what a sysfs device directory's uevent file says of its node.
type Uevent struct {
	DevName string // relative to /dev (for example "dri/card0"); "" when absent
	Dev     string // "MAJOR:MINOR" as in the dev attribute; "" when absent
}

// ReadUevent reads the uevent file of a sysfs device directory.
func ReadUevent(sysDir string) (Uevent, error) {
	b, err := readFile(filepath.Join(sysDir, "uevent"))
	if err != nil {
		return Uevent{}, err
	}
	return parseUevent(b)
}

// parseUevent finds DEVNAME, MAJOR and MINOR in the contents of a uevent
// file. A DEVNAME that would leave /dev is an error; numbers that are not
// decimal are left out.
func parseUevent(b []byte) (Uevent, error) {
	var u Uevent
	var major, minor string
	named := false
	for line := range strings.Lines(string(b)) {
		key, v, _ := strings.Cut(strings.TrimRight(line, "\n"), "=")
		switch {
		case key == "DEVNAME" && !named:
			if err := validDevName(v); err != nil {
				return Uevent{}, err
			}
			u.DevName, named = v, true
		case key == "MAJOR":
			major = v
		case key == "MINOR":
			minor = v
		}
	}
	_, okMajor := Index(major, "")
	_, okMinor := Index(minor, "")
	if okMajor && okMinor {
		u.Dev = major + ":" + minor
	}
	return u, nil
}

// validDevName refuses names that would leave /dev.
func validDevName(v string) error {
	if v == "" || path.IsAbs(v) || path.Clean(v) != v || v == ".." || strings.HasPrefix(v, "../") {
		return fmt.Errorf("unsafe DEVNAME %q", v)
	}
	return nil
}

// NodeExists reports whether /dev/<devname> is a character device (not a
// link, a regular file or anything else). Each /dev directory is listed once
// per Host, and the listing carries each entry's type: one listing is far
// cheaper than a stat per device on hosts with hundreds of nodes. Whether
// the device is the one sysfs describes is CheckNode's job, for the few
// nodes handed out.
func (h *Host) NodeExists(devname string) bool {
	dir, base := path.Split(devname)
	names, ok := h.dirs[dir]
	if !ok {
		names = map[string]bool{}
		d := h.Dev(dir)
		_ = h.List(d, func(name []byte, _ uint64, typ uint8) {
			if typ == unix.DT_CHR || typ == unix.DT_UNKNOWN && isChar(d+"/"+string(name)) {
				names[string(name)] = true
			}
		})
		if h.dirs == nil {
			h.dirs = map[string]map[string]bool{}
		}
		h.dirs[dir] = names
	}
	return names[base]
}

func isChar(p string) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR
}

// CheckNode checks that /dev/<devname> is a character device whose
// major:minor is the one in the dev attribute of the sysfs device directory
// sysDir. Anything else (a dangling or live symbolic link, a regular file,
// another device planted under the name) is an error saying what it is.
func (h *Host) CheckNode(devname, sysDir string) error {
	return h.checkNode(devname, sysDir, "")
}

// checkNode is CheckNode with the device number sysfs gives, when the
// caller has it already ("" reads the dev attribute).
func (h *Host) checkNode(devname, sysDir, want string) error {
	return h.checkChar(devname, want, sysDir, "sysfs")
}

// ResolveNode returns the container-facing path ("/dev/...", without the
// root) of the node of a sysfs device directory, checked as CheckNode
// does. The kernel's own name for the node is in uevent's DEVNAME;
// conventional is what devtmpfs calls it by default (for example
// "dri/card0"), used when uevent has no DEVNAME or its node does not pass
// the check. The device number comes from uevent's MAJOR and MINOR, the
// same numbers as the dev attribute, which is read only when uevent lacks
// them. Callers check the conventional node first with NodeExists, so
// discovery needs no per-device reads and only the devices actually
// handed out pay for reading uevent and for the stat.
func (h *Host) ResolveNode(sysDir, conventional string) (string, error) {
	u, err := ReadUevent(sysDir)
	if err == nil && u.DevName != "" && u.DevName != conventional && h.NodeExists(u.DevName) &&
		h.checkNode(u.DevName, sysDir, u.Dev) == nil {
		return "/dev/" + u.DevName, nil
	}
	if err := h.checkNode(conventional, sysDir, u.Dev); err != nil {
		return "", err
	}
	return "/dev/" + conventional, nil
}

// Index returns the decimal number that follows prefix in name, for names
// such as "tty13" or "ttyUSB2". It reports false when name is not prefix
// followed by digits only (leading zeros are refused, as the kernel never
// makes them).
func Index(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" || len(rest) > 9 || rest[0] == '0' && len(rest) > 1 {
		return 0, false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return 0, false
		}
	}
	n, _ := strconv.Atoi(rest)
	return n, true
}
