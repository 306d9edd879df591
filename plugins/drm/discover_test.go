package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/pkg/sysfs"
	"github.com/cdi-exec/plugins/test/fixture"
	"golang.org/x/sys/unix"
)

// testHost is a machine with one device of each kind inventory tells apart.
var testHost = fixture.Host{
	GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x10de", Device: "0x2330", NUMA: fixture.Int(0), Driver: "nvidia", Card: 0, Render: 128, Control: -1},
		{Addr: "0000:04:00.0", Vendor: "0x1002", Device: "0x73bf", NUMA: fixture.Int(1), Driver: "amdgpu", Card: 1, Render: 129, Control: 65},
		{Addr: "0000:05:00.0", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(1), Driver: "i915", Card: 2, Render: 130, Control: -1, TotalVFs: 2, NumVFs: 1},
		{Addr: "0000:05:00.1", Vendor: "0x8086", Device: "0x56c0", Driver: "i915", Card: 3, Render: 131, Control: -1, PhysFn: "0000:05:00.0"},
		{Addr: "0000:06:00.0", Vendor: "0x10de", Device: "0x2331", NUMA: fixture.Int(0), Driver: "nvidia", Card: 4, Render: 132, Control: -1, NoDevNode: true},
	},
	PlatformGPUs: []fixture.PlatformGPU{{Path: "platform/simple-framebuffer.0", Card: 5, Render: -1}},
}

const platformKey = "/sys/devices/platform/simple-framebuffer.0"

func buildHost(t testing.TB, h fixture.Host) *sysfs.Host {
	t.Helper()
	root := t.TempDir()
	if err := h.Build(root); err != nil {
		t.Fatal(err)
	}
	return sysfs.NewHost(root)
}

func filterOf(t *testing.T, raw string) filter {
	t.Helper()
	var a args
	if err := (protocol.Config{Args: json.RawMessage(raw)}).DecodeArgs(&a); err != nil {
		t.Fatal(err)
	}
	f, _, err := a.validate()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestInventoryReasons: each config filter keeps the devices it names and
// says of every other device why it is not handed out.
func TestInventoryReasons(t *testing.T) {
	h := buildHost(t, testHost)
	const (
		vf      = "SR-IOV VF (handed out only when pci_addresses names it)"
		pf      = "SR-IOV PF with active VFs"
		noNode  = "wanted device node missing from /dev"
		vendor  = "vendor not in vendorid_whitelist"
		device  = "device not in deviceid_whitelist"
		notAddr = "not in pci_addresses"
	)
	tests := []struct {
		args string
		want map[string]string // key → reason, "" for usable
	}{
		{`{}`, map[string]string{"0000:03:00.0": "", "0000:04:00.0": "", "0000:05:00.0": pf, "0000:05:00.1": vf, "0000:06:00.0": noNode, platformKey: ""}},
		{`{"vendorid_whitelist":["0x10DE"]}`, map[string]string{"0000:03:00.0": "", "0000:04:00.0": vendor, "0000:05:00.0": vendor, "0000:05:00.1": vendor,
			"0000:06:00.0": noNode, platformKey: "not a PCI device (id whitelist set)"}},
		{`{"deviceid_whitelist":["0x73bf"]}`, map[string]string{"0000:03:00.0": device, "0000:04:00.0": "", "0000:05:00.0": device, "0000:05:00.1": device,
			"0000:06:00.0": device, platformKey: "not a PCI device (id whitelist set)"}},
		{`{"pci_addresses":["0000:05:00.1","0000:06:00.0"]}`, map[string]string{"0000:03:00.0": notAddr, "0000:04:00.0": notAddr, "0000:05:00.0": notAddr,
			"0000:05:00.1": "", "0000:06:00.0": noNode, platformKey: notAddr}},
		{`{"want_device_nodes":["control"]}`, map[string]string{"0000:04:00.0": ""}},
	}
	for _, tt := range tests {
		gpus, err := inventory(h, filterOf(t, tt.args), pool.Scan{})
		if err != nil {
			t.Fatalf("%s: %v", tt.args, err)
		}
		got := map[string]string{}
		for _, g := range gpus {
			got[g.Device.Key] = g.Reason
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s:\n got  %v\n want %v", tt.args, got, tt.want)
		}
	}
}

// TestInventoryNodes: a usable device hands out its wanted nodes in the
// configured order, resolved through uevent's DEVNAME when that node
// exists; an unusable one lists every node it has, for people to see.
func TestInventoryNodes(t *testing.T) {
	h := buildHost(t, testHost)
	// udev named card1's node differently.
	uevent := findUevent(t, h.Root, "card1")
	if err := os.WriteFile(uevent, []byte("MAJOR=226\nMINOR=1\nDEVNAME=dri/by-path/amd-card\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.Root, "dev/dri/by-path"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The node udev made: the same device as card1's default node. Only
	// a character device with sysfs's numbers is handed out.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(h.Root, "dev/dri/card1"), &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(h.Root, "dev/dri/by-path/amd-card"), unix.S_IFCHR|0o600, int(st.Rdev)); err != nil {
		t.Skipf("cannot make the device node here: %v", err)
	}
	gpus, err := inventory(h, filterOf(t, `{"want_device_nodes":["render","primary"]}`), pool.Scan{})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]gpu{}
	for _, g := range gpus {
		byKey[g.Device.Key] = g
	}
	tests := []struct {
		key             string
		nodes, resolved []string
		minors          []string
	}{
		{"0000:03:00.0", []string{"/dev/dri/renderD128", "/dev/dri/card0"}, []string{"/dev/dri/renderD128", "/dev/dri/card0"}, nil},
		{"0000:04:00.0", []string{"/dev/dri/renderD129", "/dev/dri/card1"}, []string{"/dev/dri/renderD129", "/dev/dri/by-path/amd-card"}, nil},
		{"0000:06:00.0", nil, nil, []string{"/dev/dri/card4", "/dev/dri/renderD132"}},
	}
	for _, tt := range tests {
		g, ok := byKey[tt.key]
		if !ok {
			t.Fatalf("%s missing", tt.key)
		}
		if !slices.Equal(g.Device.Nodes, tt.nodes) {
			t.Errorf("%s: nodes %v, want %v", tt.key, g.Device.Nodes, tt.nodes)
		}
		if tt.resolved == nil {
			if g.Device.Resolve != nil {
				t.Errorf("%s: unusable device resolves", tt.key)
			}
			minors := slices.Sorted(slices.Values(g.minors))
			if !slices.Equal(minors, tt.minors) {
				t.Errorf("%s: minors %v, want %v", tt.key, minors, tt.minors)
			}
			continue
		}
		if got, err := g.Device.Resolve(); err != nil || !slices.Equal(got, tt.resolved) {
			t.Errorf("%s: resolved %v, %v, want %v", tt.key, got, err, tt.resolved)
		}
	}
}

// findUevent returns the uevent file of a DRM minor, through its class link.
func findUevent(t *testing.T, root, minor string) string {
	t.Helper()
	target, err := filepath.EvalSymlinks(filepath.Join(root, "sys/class/drm", minor))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(target, "uevent")
}

// TestInventoryScan: ADD's scan skips devices other requests hold without
// reading them, and NUMA is read only when asked for.
func TestInventoryScan(t *testing.T) {
	h := buildHost(t, testHost)
	f := filterOf(t, `{}`)
	holders := map[string]string{"0000:03:00.0": "other", "0000:04:00.0": "me"}
	for _, scan := range []pool.Scan{{}, {NUMA: true, Holder: func(k string) string { return holders[k] }, RequestID: "me"}} {
		gpus, err := inventory(h, f, scan)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, g := range gpus {
			if g.Reason == "" || g.Reason == "held by another request" {
				got[g.Device.Key] = fmt.Sprintf("%s numa=%d", g.Reason, g.Device.NUMA)
			}
		}
		want := map[string]string{"0000:03:00.0": " numa=-1", "0000:04:00.0": " numa=-1", platformKey: " numa=-1"}
		if scan.NUMA {
			want = map[string]string{"0000:03:00.0": "held by another request numa=-1", "0000:04:00.0": " numa=1", platformKey: " numa=-1"}
		}
		if !maps.Equal(got, want) {
			t.Errorf("scan NUMA=%v: got %v, want %v", scan.NUMA, got, want)
		}
	}
}

// TestPluginDiscover: the plugin's discovery hands pool only the usable
// devices, and its DEVICES inventory lists all with their reasons.
func TestPluginDiscover(t *testing.T) {
	h := buildHost(t, testHost)
	p := &plugin{host: h, filter: filterOf(t, `{}`)}
	devs, err := p.discover(t.Context(), nil, pool.Scan{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, d := range devs {
		keys = append(keys, d.Key)
	}
	slices.Sort(keys)
	if want := []string{platformKey, "0000:03:00.0", "0000:04:00.0"}; !slices.Equal(keys, want) {
		t.Errorf("discover = %v, want %v", keys, want)
	}
	infos, err := p.inventory(t.Context(), nil)
	if err != nil || len(infos) != 6 {
		t.Fatalf("inventory = %d devices, %v", len(infos), err)
	}
	for _, d := range infos {
		if d.Usable != (d.Reason == "") || len(d.Nodes) == 0 || strings.Contains(d.Key, "\n") {
			t.Errorf("DEVICES entry %+v", d)
		}
	}
}

func BenchmarkInventory(b *testing.B) {
	for _, n := range []int{8, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var h fixture.Host
			for i := range n {
				h.GPUs = append(h.GPUs, fixture.GPU{
					Addr: fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32), Vendor: "0x10de", Device: "0x2330",
					NUMA: fixture.Int(i % 4), Driver: "nvidia", Card: i, Render: 128 + i, Control: -1,
				})
			}
			root := buildHost(b, h).Root
			f, _, _ := args{}.validate()
			for b.Loop() {
				gpus, err := inventory(sysfs.NewHost(root), f, pool.Scan{})
				if err != nil || len(gpus) != n {
					b.Fatal(err, len(gpus))
				}
			}
		})
	}
}
