package chardev

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/internal/alloc"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
)

// familyHost builds a host with consoles tty0..tty11, platform UARTs
// ttyS0..ttyS1 and USB serial adapters ttyUSB0, ttyUSB2 and ttyUSB10
// on a controller behind a bridge on NUMA node 1, and returns its root.
func familyHost(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if fixture.NodesIn(root) == fixture.FileNodes {
		t.Skip("no character devices can be made here")
	}
	h := fixture.Host{
		TTYs:     map[string]int{"tty": 12, "ttyS": 2},
		USBHosts: []fixture.USBHost{{Addr: "0000:80:14.0", Bridges: []string{"0000:80:01.0"}, NUMA: fixture.Int(1), TTYs: []int{0, 2, 10}}},
		NUMA:     []fixture.NUMANode{{CPUs: "0-3", MemoryMiB: 1024}, {CPUs: "4-7", MemoryMiB: 1024}},
	}
	if err := h.Build(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// consoles is the virtual-console preset with tty1..tty3 reserved.
var consoles = Rule{Class: "tty", Family: "tty", Group: GroupNode, Shares: 1, Unplaced: true,
	Reserve: []Reserve{{Below: 1, Reason: "console"}, {Below: 4, Reason: "reserved"}}}

func discoverKeys(t *testing.T, e *Engine, scan pool.Scan) []string {
	t.Helper()
	devs, err := e.Discover(context.Background(), nil, scan)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(devs))
	for i, d := range devs {
		keys[i] = d.Key
		if len(d.Nodes) != 1 || d.Nodes[0] != "/dev/"+d.Key {
			t.Errorf("%s: nodes %v", d.Key, d.Nodes)
		}
		if i > 0 && d.Index <= devs[i-1].Index {
			t.Errorf("%s: index %d after %d", d.Key, d.Index, devs[i-1].Index)
		}
	}
	return keys
}

func inventory(t *testing.T, e *Engine) map[string]protocol.DeviceInfo {
	t.Helper()
	inv, err := e.Inventory(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protocol.DeviceInfo{}
	for _, d := range inv {
		out[d.Key] = d
	}
	return out
}

// A family takes the names that are exactly its prefix and a number, in
// number order (never the listing's or lexical order), and keeps its
// reserved numbers out of the handout, listing them with their reason.
func TestFamilySelection(t *testing.T) {
	root := familyHost(t)
	for _, tt := range []struct {
		name     string
		rule     Rule
		keys     []string
		reserved map[string]string // key → reason, for DEVICES
	}{
		{"consoles", consoles, []string{"tty4", "tty5", "tty6", "tty7", "tty8", "tty9", "tty10", "tty11"},
			map[string]string{"tty0": "console", "tty1": "reserved", "tty2": "reserved", "tty3": "reserved"}},
		{"consoles, none reserved", Rule{Class: "tty", Family: "tty", Shares: 1},
			[]string{"tty0", "tty1", "tty2", "tty3", "tty4", "tty5", "tty6", "tty7", "tty8", "tty9", "tty10", "tty11"}, nil},
		{"usb adapters", Rule{Class: "tty", Family: "ttyUSB", Shares: 1}, []string{"ttyUSB0", "ttyUSB2", "ttyUSB10"}, nil},
		{"uarts, one reserved", Rule{Class: "tty", Family: "ttyS", Shares: 1, Reserve: []Reserve{{Below: 1, Reason: "kept"}}},
			[]string{"ttyS1"}, map[string]string{"ttyS0": "kept"}},
		{"no such family", Rule{Class: "tty", Family: "ttyACM", Shares: 1}, []string{}, nil},
		{"no such class", Rule{Class: "nothing", Family: "tty", Shares: 1}, []string{}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := New(root, []Rule{tt.rule})
			if got := discoverKeys(t, e, pool.Scan{}); !slices.Equal(got, tt.keys) {
				t.Errorf("Discover: %v, want %v", got, tt.keys)
			}
			inv := inventory(t, New(root, []Rule{tt.rule}))
			if len(inv) != len(tt.keys)+len(tt.reserved) {
				t.Errorf("Inventory lists %d devices, want %d: %v", len(inv), len(tt.keys)+len(tt.reserved), inv)
			}
			for _, k := range tt.keys {
				if d := inv[k]; !d.Usable || d.Reason != "" || d.Nodes[0] != "/dev/"+k {
					t.Errorf("Inventory %s: %+v, want usable", k, d)
				}
			}
			for k, why := range tt.reserved {
				if d := inv[k]; d.Usable || d.Reason != why {
					t.Errorf("Inventory %s: %+v, want reason %q", k, d, why)
				}
			}
		})
	}
}

// A family's discovery reads the class listing and /dev's, nothing per
// device: a device whose sysfs directory is gone is still discovered
// (its live check, at handout, refuses it), while DEVICES checks every
// node. A node missing from /dev, or not a character device, is left out.
func TestFamilyDiscoveryReadsNoDevice(t *testing.T) {
	root := familyHost(t)
	if err := os.RemoveAll(filepath.Join(root, "sys/devices/virtual/tty/tty5")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "dev/tty6")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "dev/tty7")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev/tty7"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := New(root, []Rule{consoles})
	devs, err := e.Discover(context.Background(), nil, pool.Scan{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, d := range devs {
		keys = append(keys, d.Key)
		_, err := d.Live.Resolve()
		if (err != nil) != (d.Key == "tty5") {
			t.Errorf("%s: live check %v", d.Key, err)
		}
	}
	if want := []string{"tty4", "tty5", "tty8", "tty9", "tty10", "tty11"}; !slices.Equal(keys, want) {
		t.Errorf("Discover: %v, want %v", keys, want)
	}
	inv := inventory(t, New(root, []Rule{consoles}))
	for k, why := range map[string]string{"tty5": "sys/class/tty/tty5/", "tty6": noNode, "tty7": noNode} {
		if d := inv[k]; d.Usable || !strings.Contains(d.Reason, why) {
			t.Errorf("Inventory %s: %+v, want a reason with %q", k, d, why)
		}
	}
}

// Devices another request holds are left out; the request's own are kept,
// so that a replay reports their current names.
func TestFamilySkipsHeld(t *testing.T) {
	root := familyHost(t)
	held := map[string]string{"tty4": "other", "tty5": "me"}
	scan := pool.Scan{RequestID: "me", Holder: func(k string) string { return held[k] }}
	got := discoverKeys(t, New(root, []Rule{consoles}), scan)
	if want := []string{"tty5", "tty6", "tty7", "tty8", "tty9", "tty10", "tty11"}; !slices.Equal(got, want) {
		t.Errorf("Discover: %v, want %v", got, want)
	}
}

// A family's device sits where the PCI function it hangs off does, read
// through its class link; an Unplaced family is not read at all, and a
// device on no PCI function has no place.
func TestFamilyPlace(t *testing.T) {
	root := familyHost(t)
	chain := []string{"pci0000:80", "0000:80:01.0", "0000:80:14.0"}
	for _, tt := range []struct {
		name  string
		rule  Rule
		key   string
		numa  int
		chain []string
	}{
		{"usb adapter", Rule{Class: "tty", Family: "ttyUSB", Shares: 1}, "ttyUSB10", 1, chain},
		{"usb adapter, unplaced", Rule{Class: "tty", Family: "ttyUSB", Shares: 1, Unplaced: true}, "ttyUSB10", alloc.Unknown, nil},
		{"platform uart", Rule{Class: "tty", Family: "ttyS", Shares: 1}, "ttyS1", alloc.Unknown, nil},
		{"console", consoles, "tty4", alloc.Unknown, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := New(root, []Rule{tt.rule})
			devs, err := e.Discover(context.Background(), nil, pool.Scan{})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(devs, func(d pool.Device) bool { return d.Key == tt.key })
			if i < 0 {
				t.Fatalf("%s not discovered", tt.key)
			}
			if numa, chain := e.Place(context.Background(), nil, devs[i]); numa != tt.numa || !slices.Equal(chain, tt.chain) {
				t.Errorf("Place: %d %v, want %d %v", numa, chain, tt.numa, tt.chain)
			}
			d := inventory(t, e)[tt.key]
			if d.NUMA != tt.numa || (tt.chain == nil) != (d.PCIeRoot == "") {
				t.Errorf("Inventory: %+v, want NUMA %d, place %v", d, tt.numa, tt.chain)
			}
			if tt.chain != nil && (d.PCIeRoot != chain[0] || !slices.Equal(d.PCIeBridges, chain[1:])) {
				t.Errorf("Inventory: root %q bridges %v, want %v", d.PCIeRoot, d.PCIeBridges, chain)
			}
		})
	}
}
