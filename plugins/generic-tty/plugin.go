package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "generic-tty"

var about = skel.About{Name: name, Summary: "hands tty device nodes to containers", New: newPlugin}

// args are the plugin's config args (docs/plugins.md).
type args struct {
	// NumSystemReserved ttys are kept for the host. For the "tty" family
	// that is tty1..ttyN (tty0, the current console, is never handed out);
	// for other families it is the N lowest-numbered devices.
	NumSystemReserved int `json:"num_system_reserved"`
	// Pattern selects the tty family: "tty" (default), "ttyS", "ttyUSB", ...
	// A trailing "*" is accepted and ignored.
	Pattern string `json:"pattern"`
	// NUMAPolicy is "preferred" (default) or "strict".
	NUMAPolicy string `json:"numa_policy"`
}

type plugin struct {
	pool.Pool
	host     *sysfs.Host
	prefix   string
	firstIdx int // lowest index that may be handed out
}

func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err
	}
	if a.NumSystemReserved < 0 {
		return nil, fmt.Errorf("num_system_reserved must not be negative, got %d", a.NumSystemReserved)
	}
	prefix := strings.TrimSuffix(a.Pattern, "*")
	if a.Pattern == "" {
		prefix = "tty"
	}
	if !validPrefix(prefix) {
		return nil, fmt.Errorf("pattern %q: want a tty family name of ASCII letters, such as \"ttyS\"", a.Pattern)
	}
	strict, err := pool.StrictNUMA(a.NUMAPolicy)
	if err != nil {
		return nil, err
	}
	p := &plugin{host: sysfs.NewHost(c.Env.HostRoot), prefix: prefix, firstIdx: a.NumSystemReserved}
	if prefix == "tty" {
		p.firstIdx = a.NumSystemReserved + 1 // tty0 is never handed out
	}
	p.Pool = pool.Pool{Name: name, Spec: spec, Strict: strict, Discoverer: p, Lister: p, Placer: p}
	return p, nil
}

func validPrefix(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// Discover lists the usable ttys: in the family, not reserved, with a node
// under /dev.
func (p *plugin) Discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	ttys, err := p.host.TTYs(p.prefix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no tty class at all: nothing to hand out
	}
	if err != nil {
		return nil, err
	}
	devs := make([]pool.Device, 0, len(ttys)) // sized once: see drm's discover
	for _, t := range ttys {
		if t.Index < p.firstIdx || scan.Skipped(t.Name) {
			continue
		}
		if !p.host.Usable(t) {
			continue // no /dev node
		}
		devs = append(devs, pool.Device{
			Key: t.Name, Index: t.Index, NUMA: alloc.Unknown, Nodes: []string{"/dev/" + t.Name},
			Live: liveTTY{p.host, t},
		})
	}
	return devs, nil
}

// Inventory lists every tty of the family and why it is not handed out.
func (p *plugin) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	ttys, err := p.host.TTYs(p.prefix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, 0, len(ttys))
	for _, t := range ttys {
		d := protocol.DeviceInfo{Key: t.Name, Nodes: []string{"/dev/" + t.Name}}
		var pcie sysfs.PCIe
		d.NUMA, pcie = p.locate(t.Name)
		d.PCIeRoot, d.PCIeBridges = pcie.Root, pcie.Bridges("")
		switch {
		case p.prefix == "tty" && t.Index == 0:
			d.Reason = "the current console, never handed out"
		case t.Index < p.firstIdx:
			d.Reason = "reserved (num_system_reserved)"
		case !p.host.Usable(t):
			d.Reason = "no /dev node (or not a character device)"
		default:
			node, err := p.host.TTYNode(t)
			if err != nil {
				d.Reason = err.Error()
				break
			}
			d.Usable = true
			d.Nodes = []string{node}
		}
		out = append(out, d)
	}
	return out, nil
}

// liveTTY is the live check of a tty about to be handed out: its node in
// /dev is the character device sysfs describes.
type liveTTY struct {
	host *sysfs.Host
	tty  sysfs.TTY
}

// Resolve implements pool.Resolver.
func (l liveTTY) Resolve() ([]string, error) {
	n, err := l.host.TTYNode(l.tty)
	return []string{n}, err
}

// Place is where a tty sits, for the choice.
func (p *plugin) Place(_ context.Context, _ *skel.Call, d pool.Device) (int, []string) {
	numa, pcie := p.locate(d.Key)
	return numa, pcie.Chain()
}

// locate reads where a tty sits: the NUMA node and PCIe place of the PCI
// function it hangs off (a USB serial adapter's controller, a PCI serial
// card), through its class link. Virtual consoles (the "tty" family) and
// platform UARTs sit on no PCI function: unknown, and for the consoles
// without a read.
func (p *plugin) locate(name string) (int, sysfs.PCIe) {
	if p.prefix == "tty" {
		return alloc.Unknown, sysfs.PCIe{}
	}
	path, err := p.host.ClassDevice("tty", name)
	if err != nil {
		return alloc.Unknown, sysfs.PCIe{}
	}
	return p.host.Place(path)
}
