package sysfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/pkg/request"
)

// IDSet validates a list of PCI ids ("0x10de", any case) and returns them
// lower-cased as a set; nil for a nil list (no filter).
func IDSet(field string, ids []string) (map[string]bool, error) {
	return lowerSet(field, ids, validID, `a PCI id such as "0x10de"`)
}

// AddrSet validates a list of PCI addresses and returns them lower-cased as
// a set; nil for a nil list.
func AddrSet(field string, addrs []string) (map[string]bool, error) {
	return lowerSet(field, addrs, request.IsPCIAddr, "a PCI address such as 0000:03:00.0")
}

// lowerSet lower-cases each value, checks it with valid, and returns the
// set; nil for a nil list.
func lowerSet(field string, values []string, valid func(string) bool, want string) (map[string]bool, error) {
	if values == nil {
		return nil, nil
	}
	set := map[string]bool{}
	for _, v := range values {
		norm := strings.ToLower(v)
		if !valid(norm) {
			return nil, fmt.Errorf("%s: %q is not %s", field, v, want)
		}
		set[norm] = true
	}
	return set, nil
}

func validID(s string) bool {
	if len(s) != 6 || !strings.HasPrefix(s, "0x") {
		return false
	}
	for _, c := range s[2:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// PCIDir returns the host path of a PCI function's device directory link.
func (h *Host) PCIDir(addr string) string {
	return h.Sys("bus", "pci", "devices", addr)
}

// PCIFunctions lists the PCI addresses in /sys/bus/pci/devices, sorted.
func (h *Host) PCIFunctions() ([]string, error) {
	names, err := readDirNames(h.Sys("bus", "pci", "devices"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	slices.Sort(names)
	return names, err
}

// VFs lists the addresses of a PF's VFs from its virtfnN links, in VF
// order, reading at most count links. The kernel numbers a PF's VFs
// 0..numvfs-1 without gaps, so the list ends at the first missing link: a
// PF still losing its VFs (virtfn0 gone, virtfn1 not yet) has none, not
// the ones that are left.
func VFs(pf *Dir, count int) []string {
	var out []string
	for k := range count {
		a := pf.LinkBase(fmt.Sprintf("virtfn%d", k))
		if a == "" {
			break
		}
		out = append(out, a)
	}
	return out
}

// VFAddr returns the address VF k (0-based) of the PF at addr will have,
// from the PF's sriov_offset and sriov_stride, as the kernel's
// pci_iov_virtfn_bus and pci_iov_virtfn_devfn compute it: VF k's routing
// ID (bus << 8 | devfn) is the PF's plus offset + k × stride.
func VFAddr(pf *Dir, addr string, k int) (string, error) {
	offset, err := pf.Attr("sriov_offset")
	if err != nil {
		return "", err
	}
	stride, err := pf.Attr("sriov_stride")
	if err != nil {
		return "", err
	}
	var o, s int
	if _, err := fmt.Sscanf(offset+" "+stride, "%d %d", &o, &s); err != nil {
		return "", fmt.Errorf("sriov_offset %q, sriov_stride %q: %w", offset, stride, err)
	}
	var dom, bus, dev, fn int
	if _, err := fmt.Sscanf(addr, "%04x:%02x:%02x.%x", &dom, &bus, &dev, &fn); err != nil {
		return "", fmt.Errorf("PCI address %q: %w", addr, err)
	}
	rid := bus<<8 | dev<<3 | fn
	rid += o + k*s
	if rid > 0xffff {
		return "", fmt.Errorf("VF %d of %s is past the last bus", k, addr)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", dom, rid>>8, rid>>3&0x1f, rid&7), nil
}

// VFsSettled reports whether a PF's VF links are what sriov_numvfs = n
// leaves once the kernel and udev are done: exactly virtfn0..virtfn(n-1),
// each pointing at a present device, and no virtfnK for n <= K < total.
// While VFs are being removed or created the links come and go in any
// order, so a count of the first links is not enough.
func VFsSettled(pf *Dir, n, total int) bool {
	var st unix.Stat_t
	for k := range max(n, total) {
		name := fmt.Sprintf("virtfn%d", k)
		if k < n {
			if unix.Fstatat(pf.fd, name, &st, 0) != nil { // missing or dangling
				return false
			}
		} else if unix.Fstatat(pf.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return false
		}
	}
	return true
}

// WriteAttr writes value to a sysfs attribute, bounded by ctx: a write
// that blocks (a driver stuck in probe) is abandoned with an error that
// names the file, rather than hanging the caller. The errno of a failed
// write is kept (ERANGE, EBUSY, ENOENT...).
func WriteAttr(ctx context.Context, path, value string) error {
	done := make(chan error, 1)
	go func() {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- &os.PathError{Op: "open", Path: path, Err: err}
			return
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte(value)); err != nil {
			done <- &os.PathError{Op: "write", Path: path, Err: err}
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("write %q to %s: no completion: %w", value, path, ctx.Err())
	}
}

// WaitFor polls until ok returns true or ctx ends.
func WaitFor(ctx context.Context, what string, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
