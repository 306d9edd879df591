package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/internal/vfio"
)

// Companion nodes: the vendor nodes that compute needs besides a GPU's DRM
// nodes (docs/plugins.md#companion-nodes). A GPU bound to amdgpu brings
// /dev/kfd; one bound to nvidia brings its own /dev/nvidia<minor> and the
// driver's control nodes. Each is handed out when it exists, checked live
// as a DRM node is.

// The companion_nodes values.
const (
	companionsAuto = "auto"
	companionsNone = "none"
)

// Shared companion nodes, in handout order: after every GPU's own nodes,
// each once (pool.Pool.Shared). VFIO mode's container and iommufd nodes
// are shared the same way.
const (
	kfd           = "kfd"
	nvidiaCtl     = "nvidiactl"
	nvidiaUVM     = "nvidia-uvm"
	nvidiaTools   = "nvidia-uvm-tools"
	nvidiaModeset = "nvidia-modeset"
)

var sharedNodes = []string{"/dev/" + kfd, "/dev/" + nvidiaCtl, "/dev/" + nvidiaUVM, "/dev/" + nvidiaTools, "/dev/" + nvidiaModeset, vfio.Container, vfio.IOMMU}

// The NVIDIA driver's fixed minors on its frontend major (195).
const (
	nvidiaCtlMinor     = 255
	nvidiaModesetMinor = 254
)

// companions reads, for one ADD or DEVICES, what the companion nodes
// should be: the kernel's character majors, read once.
type companions struct {
	host   *sysfs.Host
	majors map[string]int
}

// of returns the companion nodes of a device that is being handed out: its
// own, then the shared ones it needs, those that exist. A node that exists
// but is not the character device the kernel describes is an error: the
// device is then not handed out.
func (c *companions) of(ft *fact) ([]string, error) {
	var names []string
	switch {
	case ft.flags&byAMD != 0:
		names = []string{kfd}
	case ft.flags&byNVIDIA != 0:
		minor, err := nvidiaMinor(c.host, ft.key())
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// No /proc/driver/nvidia: the driver is not loaded as this
			// expects, and the GPU's own node cannot be told.
		case err != nil:
			return nil, err
		default:
			names = append(names, "nvidia"+strconv.Itoa(minor))
		}
		names = append(names, nvidiaCtl, nvidiaUVM, nvidiaTools, nvidiaModeset)
	default:
		return nil, nil
	}
	var out []string
	for _, name := range names {
		if _, err := os.Lstat(c.host.Dev(name)); errors.Is(err, fs.ErrNotExist) {
			continue // absent: nothing to check, and /proc/devices is not read
		}
		want, err := c.numbers(name)
		if err != nil {
			return nil, err
		}
		if err := c.host.CheckCharNode(name, want); err != nil {
			return nil, err
		}
		out = append(out, "/dev/"+name)
	}
	return out, nil
}

// numbers returns the device number a companion node must have, as
// "major:minor"; "" when the kernel does not say (the node is then checked
// to be a character device only).
func (c *companions) numbers(name string) (string, error) {
	if name == kfd {
		if dev, err := sysfs.ReadAttr(c.host.Sys("class", "kfd", "kfd", "dev")); err == nil {
			return dev, nil
		}
	}
	if c.majors == nil {
		m, err := c.host.CharMajors()
		if err != nil {
			return "", fmt.Errorf("reading /proc/devices: %w", err)
		}
		c.majors = m
	}
	major, minor := -1, 0
	switch name {
	case kfd:
		major = c.major("kfd")
	case nvidiaUVM:
		major = c.major("nvidia-uvm")
	case nvidiaTools:
		major, minor = c.major("nvidia-uvm"), 1
	case nvidiaCtl:
		major, minor = c.major("nvidia-frontend", "nvidia"), nvidiaCtlMinor
	case nvidiaModeset:
		major, minor = c.major("nvidia-frontend", "nvidia"), nvidiaModesetMinor
	default: // nvidia<minor>
		major = c.major("nvidia-frontend", "nvidia")
		minor, _ = strconv.Atoi(strings.TrimPrefix(name, "nvidia"))
	}
	if major < 0 {
		return "", nil
	}
	return fmt.Sprintf("%d:%d", major, minor), nil
}

// major is the first of the drivers' majors /proc/devices lists; -1 when
// it lists none.
func (c *companions) major(drivers ...string) int {
	for _, d := range drivers {
		if m, ok := c.majors[d]; ok {
			return m
		}
	}
	return -1
}

// nvidiaMinor reads an NVIDIA GPU's device minor from the driver's
// /proc/driver/nvidia/gpus/<pci address>/information ("Device Minor: 3").
func nvidiaMinor(h *sysfs.Host, addr string) (int, error) {
	b, err := os.ReadFile(h.Proc("driver/nvidia/gpus/" + addr + "/information"))
	if err != nil {
		return 0, err
	}
	minor, ok := parseDeviceMinor(b)
	if !ok {
		return 0, fmt.Errorf("/proc/driver/nvidia/gpus/%s/information has no Device Minor", addr)
	}
	return minor, nil
}

// parseDeviceMinor finds the "Device Minor:" line of an NVIDIA information
// file; false when there is none or its value is not a minor below 254
// (the driver's own nodes take 254 and 255).
func parseDeviceMinor(b []byte) (int, bool) {
	in := parseNVIDIAInfo(b)
	if in.minor < 0 {
		return 0, false
	}
	return in.minor, true
}
