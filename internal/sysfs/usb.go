package sysfs

import (
	"fmt"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CharDevice resolves a character device number to the sysfs path of its
// device without the host root ("/sys/devices/virtual/misc/kvm"), through
// the kernel's /sys/dev/char/<major>:<minor> link.
func (h *Host) CharDevice(major, minor uint32) (string, error) {
	return h.Resolve(h.Sys("dev", "char", fmt.Sprintf("%d:%d", major, minor)))
}

// USB is the USB device a device node hangs off: its sysfs path without
// the host root, its port path (the directory's name, "1-1.4") and what
// its descriptors say, as sysfs gives them (ids are four lower-case hex
// digits, "1a86"; Serial is "" when the device has none).
type USB struct {
	Dir             string
	Port            string
	Vendor, Product string
	Serial          string
	Manufacturer    string
	ProductName     string
}

// USBOf finds the USB device that the device at the resolved sysfs path
// sysPath (without the host root) hangs off: the nearest directory above
// it, or itself, that has an idVendor attribute. It reports false for a
// device on no USB device.
func (h *Host) USBOf(sysPath string) (USB, bool) {
	for dir := sysPath; dir != "/sys/devices" && dir != "/" && dir != "."; dir = path.Dir(dir) {
		d, err := OpenDir(filepath.Join(h.Root, dir))
		if err != nil {
			continue
		}
		vendor, err := d.Attr("idVendor")
		if err != nil {
			d.Close()
			continue
		}
		u := USB{Dir: dir, Port: path.Base(dir), Vendor: vendor}
		u.Product, _ = d.Attr("idProduct")
		u.Serial, _ = d.Attr("serial")
		u.Manufacturer, _ = d.Attr("manufacturer")
		u.ProductName, _ = d.Attr("product")
		d.Close()
		return u, true
	}
	return USB{}, false
}

// DriverOf returns the driver bound to the device a class device belongs
// to: the base name of <sysPath>/device/driver, else of <sysPath>/driver,
// else of the nearest such link above; "" when none is bound (a virtual
// device such as kvm).
func (h *Host) DriverOf(sysPath string) string {
	for _, rel := range []string{"device/driver", "driver"} {
		if t, err := h.readLink(filepath.Join(sysPath, rel)); err == nil {
			return path.Base(t)
		}
	}
	for dir := path.Dir(sysPath); dir != "/sys/devices" && dir != "/" && dir != "."; dir = path.Dir(dir) {
		if t, err := h.readLink(filepath.Join(dir, "driver")); err == nil {
			return path.Base(t)
		}
	}
	return ""
}

// SubsystemOf returns the class or bus a device belongs to: the base name
// of its subsystem link ("tty", "misc", "video4linux"); "" without one.
func (h *Host) SubsystemOf(sysPath string) string {
	t, err := h.readLink(filepath.Join(sysPath, "subsystem"))
	if err != nil {
		return ""
	}
	return path.Base(t)
}

// readLink reads a link given by its sysfs path without the host root.
func (h *Host) readLink(sysPath string) (string, error) {
	return readlinkat(unix.AT_FDCWD, filepath.Join(h.Root, sysPath))
}
