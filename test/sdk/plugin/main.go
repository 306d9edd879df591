// A plugin process lives for milliseconds: the runtime's watch of the
// cgroup's CPU limit is of no use to it.
//go:debug updatemaxprocs=0

// Command serial is an example of a CDI exec plugin built outside the
// cdi-exec/plugins module on its SDK alone (pkg/skel, pkg/pool,
// pkg/protocol, pkg/request): it hands out a host's serial ports,
// /dev/ttyS<N>, one per device. docs/architecture.md#writing-a-plugin
// walks through it; test/sdk builds and runs it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/request"
	"github.com/cdi-exec/plugins/pkg/skel"
)

const name = "serial"

func main() {
	skel.Main(skel.About{Name: name, Summary: "hands serial ports to containers", New: newPlugin})
}

// args are the config's args. pool.Args takes the cdi_spec arg out and
// decodes the rest strictly: an unknown or misspelt member is code 101.
type args struct {
	// Reserved serial ports (ttyS0..ttyS<N-1>) are kept for the host.
	Reserved int `json:"reserved"`
	// TeardownLog, when set, is a file to which each teardown appends
	// one line: what the freed record holds.
	TeardownLog string `json:"teardown_log"`
}

// plugin embeds pool.Pool, which runs INFO, ADD, DEL, GC and DEVICES
// with its own store, and hands itself to the pool as the Discoverer,
// Lister and Setup it implements.
type plugin struct {
	pool.Pool
	root string // the host root, "/" on a real node
	args args
}

// newPlugin validates the config; its errors are code 101.
func newPlugin(c *skel.Call) (skel.Plugin, error) {
	var a args
	spec, err := pool.Args(c.Config, &a)
	if err != nil {
		return nil, err
	}
	if a.Reserved < 0 {
		return nil, fmt.Errorf("reserved must not be negative, got %d", a.Reserved)
	}
	p := &plugin{root: c.Env.HostRoot, args: a}
	p.Pool = pool.Pool{Name: name, Spec: spec, Discoverer: p, Lister: p, Setup: p}
	return p, nil
}

// port is one serial port of the host.
type port struct {
	name  string // ttyS<index>
	index int
}

// ports lists the host's serial ports from /sys/class/tty, in index order.
func (p *plugin) ports() ([]port, error) {
	ents, err := os.ReadDir(filepath.Join(p.root, "sys/class/tty"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []port
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "ttyS")
		if i, err := strconv.Atoi(n); ok && err == nil && i >= 0 {
			out = append(out, port{name: e.Name(), index: i})
		}
	}
	slices.SortFunc(out, func(a, b port) int { return a.index - b.index })
	return out, nil
}

// why says why a port is not handed out; "" when it is.
func (p *plugin) why(t port) string {
	if t.index < p.args.Reserved {
		return "reserved for the host (reserved)"
	}
	if _, err := os.Stat(filepath.Join(p.root, "dev", t.name)); err != nil {
		return "no /dev node"
	}
	return ""
}

// Discover implements pool.Discoverer: the usable ports. Ports another
// request holds may be left out (scan.Skipped).
func (p *plugin) Discover(_ context.Context, _ *skel.Call, scan pool.Scan) ([]pool.Device, error) {
	ports, err := p.ports()
	if err != nil {
		return nil, err
	}
	var devs []pool.Device
	for _, t := range ports {
		if scan.Skipped(t.name) || p.why(t) != "" {
			continue
		}
		devs = append(devs, pool.Device{Key: t.name, Index: t.index, NUMA: pool.UnknownNUMA, Nodes: []string{"/dev/" + t.name}})
	}
	return devs, nil
}

// Inventory implements pool.Lister: every port, and why it is not
// handed out (DEVICES).
func (p *plugin) Inventory(context.Context, *skel.Call) ([]protocol.DeviceInfo, error) {
	ports, err := p.ports()
	if err != nil {
		return nil, err
	}
	out := make([]protocol.DeviceInfo, 0, len(ports))
	for _, t := range ports {
		reason := p.why(t)
		out = append(out, protocol.DeviceInfo{Key: t.name, Nodes: []string{"/dev/" + t.name}, NUMA: pool.UnknownNUMA, Usable: reason == "", Reason: reason})
	}
	return out, nil
}

// Handout implements pool.Setup: it checks that the chosen ports' nodes
// are still there and hands them out. A port set up here would be set
// back in the Undo, which ADD calls when it fails after this item.
func (p *plugin) Handout(_ context.Context, _ *skel.Call, _ request.Item, chosen []pool.Device) (pool.Handout, error) {
	var nodes []string
	for _, d := range chosen {
		if _, err := os.Stat(filepath.Join(p.root, d.Nodes[0])); err != nil {
			return pool.Handout{}, protocol.Errorf(protocol.CodeSetup, "%s: %w", d.Key, err)
		}
		nodes = append(nodes, d.Nodes...)
	}
	return pool.Handout{Nodes: nodes, Undo: func(context.Context) {}}, nil
}

// Teardown implements pool.Setup: it runs before DEL or GC frees a
// record, with what the record holds.
func (p *plugin) Teardown(_ context.Context, _ *skel.Call, rec pool.Record) error {
	if p.args.TeardownLog == "" {
		return nil
	}
	line := fmt.Sprintf("%s %s owner=%q", rec.ID, rec.Type, rec.Owner)
	for _, a := range rec.Allocations {
		line += fmt.Sprintf(" %s=%s", a.Spec, strings.Join(a.Keys, ","))
	}
	f, err := os.OpenFile(p.args.TeardownLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}
