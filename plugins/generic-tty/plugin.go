package main

import (
	"fmt"
	"strings"

	"github.com/cdi-exec/plugins/internal/chardev"
	"github.com/cdi-exec/plugins/pkg/pool"
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

// plugin is the character-device engine (internal/chardev) with one
// rule, the tty family preset, under pool.Pool.
type plugin struct {
	pool.Pool
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
	e := chardev.New(c.Env.HostRoot, []chardev.Rule{ttyRule(prefix, a.NumSystemReserved)})
	return &plugin{pool.Pool{Name: name, Spec: spec, Strict: strict, Discoverer: e, Lister: e, Placer: e}}, nil
}

// ttyRule is the tty family prefix as a rule: its devices in
// /sys/class/tty, each its own unit keyed by name, in number order, the
// reserved ones kept for the host. The "tty" family is the virtual
// consoles: tty0, the current console, is never handed out and comes
// before the reserved tty1..ttyN, and they sit on no PCI function. Other
// families keep their N lowest-numbered devices, and sit where the PCI
// function they hang off does (a USB serial adapter's controller).
func ttyRule(prefix string, reserved int) chardev.Rule {
	r := chardev.Rule{Class: "tty", Family: prefix, Group: chardev.GroupNode, Shares: 1}
	const why = "reserved (num_system_reserved)"
	if prefix == "tty" {
		r.Unplaced = true
		r.Reserve = []chardev.Reserve{{Below: 1, Reason: "the current console, never handed out"}, {Below: reserved + 1, Reason: why}}
	} else {
		r.Reserve = []chardev.Reserve{{Below: reserved, Reason: why}}
	}
	return r
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
