// Package sysfs reads the host's /sys and /dev under an injected root
// (CDI_HOST_ROOT), so that plugins run unchanged against the real host, a
// host mounted into a container, or a fixture tree in tests.
//
// It reads only the few files a command needs; nothing here parses pci.ids.
package sysfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Host is a view of a machine's /sys and /dev below Root.
type Host struct {
	Root string // "/" on a real host
}

// Sys returns the host path of a sysfs path given relative to /sys.
func (h Host) Sys(rel ...string) string {
	return filepath.Join(append([]string{h.Root, "sys"}, rel...)...)
}

// Dev returns the host path of a /dev entry given relative to /dev.
func (h Host) Dev(rel string) string {
	return filepath.Join(h.Root, "dev", rel)
}

// ReadAttr reads a sysfs attribute and trims the trailing newline.
func ReadAttr(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// ReadInt reads a decimal sysfs attribute.
func ReadInt(p string) (int, error) {
	s, err := ReadAttr(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: not an integer: %q", p, s)
	}
	return n, nil
}

// DevName returns the DEVNAME of a sysfs device directory from its uevent
// file, relative to /dev (for example "dri/card0"). It returns "" when the
// uevent file has no DEVNAME.
func DevName(sysDir string) (string, error) {
	f, err := os.Open(filepath.Join(sysDir, "uevent"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok {
			return v, validDevName(v)
		}
	}
	return "", sc.Err()
}

// validDevName refuses names that would leave /dev.
func validDevName(v string) error {
	if v == "" || path.IsAbs(v) || path.Clean(v) != v || v == ".." || strings.HasPrefix(v, "../") {
		return fmt.Errorf("unsafe DEVNAME %q", v)
	}
	return nil
}

// Node resolves the device node of a sysfs device directory: DEVNAME from
// uevent, or fallback when uevent has none. The node must exist under the
// host's /dev; a directory does not count. The returned path is the
// container-facing one, "/dev/<devname>", without the root.
func (h Host) Node(sysDir, fallback string) (string, error) {
	name, err := DevName(sysDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if name == "" {
		name = fallback
	}
	fi, err := os.Stat(h.Dev(name))
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%s is a directory", h.Dev(name))
	}
	return "/dev/" + name, nil
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
