package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/pkg/request"
)

// DRM minor kinds, as the drm plugin's want_device_nodes names them.
const (
	Primary = "primary" // cardN
	Render  = "render"  // renderDN
	Control = "control" // controlDN (legacy)
)

// Minor is one DRM device node of a device.
type Minor struct {
	Name  string // "card0", "renderD128"
	Kind  string // Primary, Render or Control
	Index int    // the number in the name
}

// DRMDevice is a device that has DRM minors: a GPU, a display controller or
// a software framebuffer.
type DRMDevice struct {
	// Dir is the host path of the device directory (under Root).
	Dir string
	// Minors are the DRM nodes the kernel created for the device, listed
	// under Dir/drm, ordered primary, render, control.
	Minors []Minor
}

// parseMinor recognises DRM node names; connectors such as card0-DP-1 and
// other class entries are not minors.
func parseMinor(name string) (Minor, bool) {
	for _, k := range []struct{ prefix, kind string }{{"renderD", Render}, {"controlD", Control}, {"card", Primary}} {
		if n, ok := Index(name, k.prefix); ok {
			return Minor{Name: name, Kind: k.kind, Index: n}, true
		}
	}
	return Minor{}, false
}

func kindOrder(k string) int {
	switch k {
	case Primary:
		return 0
	case Render:
		return 1
	}
	return 2
}

// DRMDevices lists the devices behind /sys/class/drm, each with the minors
// the kernel lists for it, ordered by their lowest primary (card) index. The
// minors of a device are found through the class links, which point at
// <device>/drm/<minor>: the same siblings as <device>/drm/, read with one
// readlink each instead of a directory walk per device.
//
// Only minors of the given kinds are resolved (all kinds when none are
// given): each costs a readlink, and hosts have hundreds of them.
func (h *Host) DRMDevices(kinds ...string) ([]DRMDevice, error) {
	class := h.Sys("class", "drm")
	var names []string
	err := h.List(class, func(name []byte, _ uint64, _ uint8) { names = append(names, string(name)) })
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Resolve links relative to an open class directory: one path
	// component to look up per link instead of the whole path.
	cfd, err := unix.Open(class, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: class, Err: err}
	}
	defer unix.Close(cfd)
	byDir := map[string]int{}
	var devs []DRMDevice
	for _, name := range names {
		m, ok := parseMinor(name)
		if !ok || len(kinds) > 0 && !slices.Contains(kinds, m.Kind) {
			continue
		}
		dir, err := h.minorDevice(cfd, class, name)
		if err != nil {
			continue // dangling or odd link: not a usable device
		}
		i, ok := byDir[dir]
		if !ok {
			i = len(devs)
			byDir[dir] = i
			devs = append(devs, DRMDevice{Dir: dir})
		}
		devs[i].Minors = append(devs[i].Minors, m)
	}
	for i := range devs {
		slices.SortFunc(devs[i].Minors, func(a, b Minor) int {
			if d := kindOrder(a.Kind) - kindOrder(b.Kind); d != 0 {
				return d
			}
			return a.Index - b.Index
		})
	}
	slices.SortStableFunc(devs, func(a, b DRMDevice) int { return a.Order() - b.Order() })
	return devs, nil
}

// minorDevice resolves a class/drm link to the host path of its device
// directory. A dangling link is caught later: its nodes are not found.
func (h *Host) minorDevice(cfd int, class, name string) (string, error) {
	link := name
	if cfd == unix.AT_FDCWD {
		link = class + "/" + name
	}
	target, err := readlinkat(cfd, link)
	if err == unix.EINVAL {
		// Not a symlink (a hand-made tree): the entry is the minor's
		// directory, and its device link leads to the device.
		return filepath.EvalSymlinks(filepath.Join(class, name, "device"))
	}
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: class + "/" + name, Err: err}
	}
	if dir, ok := deviceOf(class, target); ok {
		return dir, nil
	}
	var minorDir string
	if filepath.IsAbs(target) {
		minorDir = filepath.Join(h.Root, target)
	} else {
		minorDir = filepath.Join(class, target)
	}
	if parent := filepath.Dir(minorDir); filepath.Base(parent) == "drm" {
		return filepath.Dir(parent), nil
	}
	// Not the usual layout: follow the minor's device link instead.
	return filepath.EvalSymlinks(filepath.Join(class, name, "device"))
}

// deviceOf resolves a class link of the kernel's shape,
// "../../devices/<path>/drm/<minor>" relative to the class directory,
// lexically, without a syscall. It accepts only a clean relative link
// whose minor sits in a "drm" directory and whose device directory lies
// under the devices directory of the sysfs tree the class directory
// belongs to; the caller resolves any other link the slow way.
func deviceOf(class, target string) (string, bool) {
	if filepath.IsAbs(target) || filepath.Clean(target) != target {
		return "", false
	}
	parent := filepath.Dir(filepath.Join(class, target))
	if filepath.Base(parent) != "drm" {
		return "", false
	}
	dir := filepath.Dir(parent)
	if devices := filepath.Dir(filepath.Dir(class)) + "/devices/"; !strings.HasPrefix(dir, devices) {
		return "", false
	}
	return dir, true
}

// DRMMinorDevice returns the host path of the device directory that the
// class entry /sys/class/drm/<name> leads to now.
func (h *Host) DRMMinorDevice(name string) (string, error) {
	return h.minorDevice(unix.AT_FDCWD, h.Sys("class", "drm"), name)
}

// MinorDir is the sysfs directory of one of the device's minors.
func (d DRMDevice) MinorDir(m Minor) string { return filepath.Join(d.Dir, "drm", m.Name) }

// Order is the device's preference index: its primary node's number, or
// for a device without one, its lowest other node number offset past any
// card number.
func (d DRMDevice) Order() int {
	if len(d.Minors) == 0 {
		return 1 << 30
	}
	if m := d.Minors[0]; m.Kind == Primary {
		return m.Index
	}
	return 1<<20 + d.Minors[0].Index
}

// SysPath is the device directory as the host sees it, without the root:
// "/sys/devices/...".
func (h *Host) SysPath(dir string) string {
	switch root := filepath.Clean(h.Root); {
	case root == "/" && strings.HasPrefix(dir, "/"):
		return dir
	case strings.HasPrefix(dir, root+"/"):
		return dir[len(root):]
	}
	rel, err := filepath.Rel(h.Root, dir)
	if err != nil {
		return dir
	}
	return "/" + rel
}

// PCIAddr returns the device's PCI address when the device directory is a
// PCI function (its name is an address such as 0000:03:00.0).
func (d DRMDevice) PCIAddr() (string, bool) {
	base := strings.ToLower(filepath.Base(d.Dir)) // the kernel writes lower case; be lenient
	return base, request.IsPCIAddr(base)
}
