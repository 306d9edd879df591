package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

// pf is a selected physical function.
type pf struct {
	addr    string
	dir     *sysfs.Dir
	total   int // sriov_totalvfs
	current int // sriov_numvfs
	numa    int
}

// pfs returns the selected PFs present on the host, in address order. The
// caller closes their directories.
func (p *plugin) pfs() ([]pf, error) {
	var all []string
	if p.vendors == nil && p.devices == nil {
		// Only addresses select: look at those, not at every PCI function.
		all = slices.Sorted(maps.Keys(p.addrs))
	} else {
		var err error
		if all, err = p.host.PCIFunctions(); err != nil {
			return nil, err
		}
	}
	var out []pf
	for _, addr := range all {
		if p.addrs != nil && !p.addrs[addr] {
			continue
		}
		dir, err := sysfs.OpenDir(p.host.PCIDir(addr))
		if err != nil {
			continue
		}
		total, err := intAttr(dir, "sriov_totalvfs")
		if err != nil || total < 1 {
			dir.Close()
			continue // not SR-IOV capable
		}
		if p.vendors != nil && !p.vendors[lowerAttr(dir, "vendor")] || p.devices != nil && !p.devices[lowerAttr(dir, "device")] {
			dir.Close()
			continue
		}
		current, _ := intAttr(dir, "sriov_numvfs")
		out = append(out, pf{addr: addr, dir: dir, total: total, current: current, numa: dir.NUMA()})
	}
	return out, nil
}

func intAttr(d *sysfs.Dir, name string) (int, error) {
	s, err := d.Attr(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

func lowerAttr(d *sysfs.Dir, name string) string {
	v, _ := d.Attr(name)
	return strings.ToLower(v)
}

// plan returns the values to write to sriov_numvfs to go from current to
// want VFs, following the kernel's rules (drivers/pci/iov.c): nothing when
// the count is right; never more than total (ERANGE); 0 first when changing
// one non-zero count to another (EBUSY); and never a change while any VF is
// allocated.
func plan(current, total, want int, busy bool) ([]int, error) {
	want = min(want, total)
	switch {
	case current == want:
		return nil, nil
	case busy:
		return nil, nil // keep the PF as it is; its VFs are in use
	case want < 0:
		return nil, fmt.Errorf("invalid VF count %d", want)
	case current == 0:
		return []int{want}, nil
	}
	return []int{0, want}, nil
}

// Discover runs only in ADD (Info is the plugin's own), inside its store
// transaction, under the store's lock: it makes sure each selected
// PF has its VFs and returns the VFs that can be handed out as candidates.
func (p *plugin) Discover(ctx context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	pfs, err := p.pfs()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "finding PFs: %w", err)
	}
	defer func() {
		for _, f := range pfs {
			f.dir.Close()
		}
	}()
	var devs []pool.Device
	for i, f := range pfs {
		vfs := sysfs.VFs(f.dir, f.current)
		busy := false
		for _, vf := range vfs {
			busy = busy || scan.Held(vf)
		}
		writes, err := plan(f.current, f.total, p.numVFs, busy)
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeSetup, "PF %s: %w", f.addr, err)
		}
		if len(writes) > 0 {
			if err := p.partition(ctx, f, writes); err != nil {
				return nil, err
			}
			f.current = writes[len(writes)-1]
		}
		for k, vf := range p.vfStates(f) {
			if vf.reason == "" {
				devs = append(devs, pool.Device{Key: vf.addr, Index: i<<16 | k, NUMA: vf.numa})
			}
		}
	}
	return devs, nil
}

// partition performs the writes of a plan on one PF, each bounded by the
// setup timeout, and waits for the kernel to create the VFs' links.
func (p *plugin) partition(ctx context.Context, f pf, writes []int) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if p.autoprobe != nil {
		v := "0"
		if *p.autoprobe {
			v = "1"
		}
		if err := sysfs.WriteAttr(ctx, f.dir.Path+"/sriov_drivers_autoprobe", v); err != nil {
			return setupError(f.addr, err)
		}
	}
	// After each write, wait until the links are exactly those of n VFs:
	// a slow udev or a simulated kernel removes and adds them in any
	// order, and "0, then N" must not go on while old VFs linger.
	for _, n := range writes {
		if err := sysfs.WriteAttr(ctx, f.dir.Path+"/sriov_numvfs", strconv.Itoa(n)); err != nil {
			return setupError(f.addr, err)
		}
		err := sysfs.WaitFor(ctx, fmt.Sprintf("exactly %d VFs of %s", n, f.addr), func() bool {
			return sysfs.VFsSettled(f.dir, n, f.total)
		})
		if err != nil {
			return setupError(f.addr, err)
		}
	}
	return nil
}

// setupError is code 107, naming the PF and the failing file and errno.
func setupError(addr string, err error) error {
	hint := ""
	if errors.Is(err, unix.ENOENT) {
		hint = " (ENOENT: does the PF have a driver bound?)"
	}
	return protocol.Errorf(protocol.CodeSetup, "PF %s: %w%s", addr, err, hint)
}
