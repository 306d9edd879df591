package main

import (
	"context"
	"fmt"

	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
	"github.com/cdi-exec/plugins/pkg/sysfs"
)

// inventory answers DEVICES: the VFs the selected PFs have now, keyed by
// PCI address, the keys a pinned ADD names. It never partitions: a PF
// without VFs is listed as itself, not usable, until an ADD creates them.
// The nodes of a VF are known only once it is handed out (its delegate, or
// its VFIO group after binding), so they are listed empty.
func (p *plugin) inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	pfs, err := p.pfs()
	if err != nil {
		return nil, fmt.Errorf("finding PFs: %w", err)
	}
	var out []protocol.DeviceInfo
	for _, f := range pfs {
		vfs := sysfs.VFs(f.dir, f.current)
		if len(vfs) == 0 {
			out = append(out, protocol.DeviceInfo{Key: f.addr, Nodes: []string{}, NUMA: f.numa,
				Reason: fmt.Sprintf("physical function without VFs; the first ADD creates %d", min(p.numVFs, f.total))})
		}
		for _, vf := range vfs {
			out = append(out, protocol.DeviceInfo{Key: vf, Nodes: []string{}, NUMA: p.vfNUMA(f, vf), Usable: true})
		}
		f.dir.Close()
	}
	return out, nil
}

// vfNUMA is a VF's NUMA node: its own when the kernel knows it, else its
// PF's.
func (p *plugin) vfNUMA(f pf, vf string) int {
	d, err := sysfs.OpenDir(p.host.PCIDir(vf))
	if err != nil {
		return f.numa
	}
	defer d.Close()
	if n := d.NUMA(); n >= 0 {
		return n
	}
	return f.numa
}
