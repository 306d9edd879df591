package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/sysfs"
	"github.com/cdi-exec/plugins/pkg/pool"
	"github.com/cdi-exec/plugins/pkg/protocol"
	"github.com/cdi-exec/plugins/test/fixture"
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
		display = "no render node: a display-only adapter"
		noCtl   = "no control node"
	)
	tests := []struct {
		args string
		want map[string]string // key → reason, "" for usable
	}{
		{`{}`, map[string]string{"0000:03:00.0": "", "0000:04:00.0": "", "0000:05:00.0": pf, "0000:05:00.1": vf, "0000:06:00.0": noNode, platformKey: display}},
		{`{"want_device_nodes":["primary"]}`, map[string]string{"0000:03:00.0": "", "0000:04:00.0": "", "0000:05:00.0": pf, "0000:05:00.1": vf, "0000:06:00.0": noNode, platformKey: ""}},
		{`{"vendorid_whitelist":["0x10DE"]}`, map[string]string{"0000:03:00.0": "", "0000:04:00.0": vendor, "0000:05:00.0": vendor, "0000:05:00.1": vendor,
			"0000:06:00.0": noNode, platformKey: "not a PCI device (id whitelist set)"}},
		{`{"deviceid_whitelist":["0x73bf"]}`, map[string]string{"0000:03:00.0": device, "0000:04:00.0": "", "0000:05:00.0": device, "0000:05:00.1": device,
			"0000:06:00.0": device, platformKey: "not a PCI device (id whitelist set)"}},
		{`{"pci_addresses":["0000:05:00.1","0000:06:00.0"]}`, map[string]string{"0000:03:00.0": notAddr, "0000:04:00.0": notAddr, "0000:05:00.0": notAddr,
			"0000:05:00.1": "", "0000:06:00.0": noNode, platformKey: notAddr}},
		{`{"want_device_nodes":["control"]}`, map[string]string{"0000:03:00.0": noCtl, "0000:04:00.0": "", "0000:05:00.0": pf, "0000:05:00.1": vf,
			"0000:06:00.0": noCtl, platformKey: noCtl}},
		{`{"want_device_nodes":["primary","render","control"]}`, map[string]string{"0000:03:00.0": noCtl, "0000:04:00.0": "", "0000:05:00.0": pf, "0000:05:00.1": vf,
			"0000:06:00.0": noNode, platformKey: display}},
	}
	facts, err := scan(h, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		gpus := judge(facts, filterOf(t, tt.args))
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
	p := makePlugin(h.Root, t.TempDir(), filterOf(t, `{"want_device_nodes":["render","primary"]}`))
	facts, err := p.facts(true, false)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]gpu{}
	for _, g := range judge(facts, p.filter) {
		if g.Reason == "" {
			g.Device.Live = p.live(g)
		}
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
			if g.Device.Live != nil {
				t.Errorf("%s: unusable device resolves", tt.key)
			}
			var minors []string
			for _, m := range g.minors {
				minors = append(minors, "/dev/dri/"+m.name())
			}
			slices.Sort(minors)
			if !slices.Equal(minors, tt.minors) {
				t.Errorf("%s: minors %v, want %v", tt.key, minors, tt.minors)
			}
			continue
		}
		if got, err := g.Device.Live.Resolve(); err != nil || !slices.Equal(got, tt.resolved) {
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

// TestScanFull: the PCI ids and NUMA nodes are read only for a full scan,
// and judging gives a device's NUMA node only when it is a PCI function.
func TestScanFull(t *testing.T) {
	h := buildHost(t, testHost)
	f := filterOf(t, `{}`)
	for _, full := range []bool{false, true} {
		facts, err := scan(h, full)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, g := range judge(facts, f) {
			if g.Reason == "" {
				got[g.Device.Key] = fmt.Sprintf("%s numa=%d", g.fact.vendor, g.Device.NUMA)
			}
		}
		want := map[string]string{"0000:03:00.0": " numa=-1", "0000:04:00.0": " numa=-1"}
		if full {
			want = map[string]string{"0000:03:00.0": "0x10de numa=0", "0000:04:00.0": "0x1002 numa=1"}
		}
		if !maps.Equal(got, want) {
			t.Errorf("full=%v: got %v, want %v", full, got, want)
		}
	}
}

// TestFactsEncoding: facts survive the cache's encoding, and INFO's count
// in place agrees with judging the decoded facts, for every filter.
func TestFactsEncoding(t *testing.T) {
	h := buildHost(t, testHost)
	facts, err := scan(h, true)
	if err != nil {
		t.Fatal(err)
	}
	enc := encodeFacts(facts, true)
	got, full, err := decodeFacts(enc)
	if err != nil || !full || !reflect.DeepEqual(got, facts) {
		t.Fatalf("decodeFacts = %+v %v %v, want %+v", got, full, err, facts)
	}
	for _, args := range []string{`{}`, `{"vendorid_whitelist":["0x10de"]}`, `{"pci_addresses":["0000:05:00.1"]}`, `{"want_device_nodes":["control"]}`} {
		f := filterOf(t, args)
		usable := 0
		for _, g := range judge(facts, f) {
			if g.Reason == "" {
				usable++
			}
		}
		if n, err := count(enc, f); err != nil || n != usable {
			t.Errorf("%s: count = %d %v, judge = %d", args, n, err, usable)
		}
	}
	for i := range enc { // a cut never decodes to less
		if _, _, err := decodeFacts(enc[:i]); err == nil {
			t.Fatalf("decodeFacts accepted %d of %d bytes", i, len(enc))
		}
		if _, err := count(enc[:i], filterOf(t, `{}`)); err == nil {
			t.Fatalf("count accepted %d of %d bytes", i, len(enc))
		}
	}
}

// TestTally: for every choice of node kinds, the tally INFO reads from the
// cache's head counts what count and judge count, whether the facts are
// full or not; it survives its encoding, and a damaged one does not decode.
func TestTally(t *testing.T) {
	h := buildHost(t, testHost)
	kinds := []string{sysfs.Primary, sysfs.Render, sysfs.Control}
	for _, full := range []bool{false, true} {
		h.Forget()
		facts, err := scan(h, full)
		if err != nil {
			t.Fatal(err)
		}
		enc, tl := encodeFacts(facts, full), tallyOf(facts)
		if got, err := decodeTally(tl.encode()); err != nil || got != tl {
			t.Fatalf("decodeTally(%v) = %v %v", tl, got, err)
		}
		for set := 1; set < 1<<len(kinds); set++ {
			want, f := wanting(t, set)
			usable := usableOf(facts, f)
			n, err := count(enc, f)
			if got := tl.usable(f.mask()); err != nil || got != n || got != usable {
				t.Errorf("full=%v %v: tally %d, count %d %v, judge %d", full, want, got, n, err, usable)
			}
		}
	}
	good := tallyOf(nil).encode()
	for _, bad := range [][]byte{nil, good[1:], append(good, 0), append([]byte{1}, good[1:]...), {0x80, 0x80, 0x80, 0x80, 0x80}} {
		if _, err := decodeTally(bad); err == nil {
			t.Errorf("decodeTally(%x) accepted", bad)
		}
	}
}

// wanting is the filter of a config wanting the node kinds of set (bit
// 1<<kind), and those kinds' names.
func wanting(t *testing.T, set int) ([]string, filter) {
	var want []string
	for k, kind := range []string{sysfs.Primary, sysfs.Render, sysfs.Control} {
		if set&(1<<k) != 0 {
			want = append(want, kind)
		}
	}
	raw, _ := json.Marshal(map[string]any{"want_device_nodes": want})
	return want, filterOf(t, string(raw))
}

// usableOf counts the devices judge calls usable under f.
func usableOf(facts []fact, f filter) int {
	usable := 0
	for _, g := range judge(facts, f) {
		if g.Reason == "" {
			usable++
		}
	}
	return usable
}

// FuzzTally: any summary either fails to decode or encodes back to the
// same tally; and a tally of up to 256 devices counts, for every choice
// of wanted nodes, what judge and count count of devices with exactly
// those nodes, and is what tallyOf makes of them.
func FuzzTally(f *testing.F) {
	f.Add(tally{0, 3, 1, 7}.encode())
	f.Add(tally{0, 1, 2, 3, 4, 5, 6, 7}.encode())
	f.Add([]byte{0, 0x80, 1})
	kinds := []string{sysfs.Primary, sysfs.Render, sysfs.Control}
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, err := decodeTally(b)
		if err != nil {
			return
		}
		if again, err := decodeTally(tl.encode()); err != nil || again != tl {
			t.Fatalf("re-encoding changed the tally: %v %v", again, err)
		}
		total := 0
		for _, c := range tl {
			total += c
		}
		if total > 256 {
			return
		}
		// The devices the tally stands for: c GPUs with the nodes of each
		// set of kinds.
		var facts []fact
		for set, c := range tl {
			for range c {
				i := len(facts)
				g := fact{sys: fmt.Sprintf("/sys/devices/pci0000:00/0000:00:%02x.%d", i/8, i%8), flags: isPCI, vendor: "0x1002", device: "0x73bf"}
				for k := range kinds {
					if set&(1<<k) != 0 {
						g.minors = append(g.minors, minor{kind: uint8(k), index: 128*k + i, inDev: true})
					}
				}
				facts = append(facts, g)
			}
		}
		if got := tallyOf(facts); got != tl {
			t.Fatalf("tallyOf(the tally's devices) = %v, want %v", got, tl)
		}
		enc := encodeFacts(facts, false)
		for set := 1; set < 1<<len(kinds); set++ {
			want, flt := wanting(t, set)
			usable := usableOf(facts, flt)
			n, err := count(enc, flt)
			if got := tl.usable(flt.mask()); err != nil || got != usable || got != n {
				t.Fatalf("tally %v wanting %v: usable %d, judge %d, count %d %v", tl, want, got, usable, n, err)
			}
		}
	})
}

// FuzzFacts: whatever a cache file holds, decoding fails cleanly or gives
// facts that encode back to the same bytes, and count agrees.
func FuzzFacts(f *testing.F) {
	f.Add(encodeFacts([]fact{{sys: "/sys/devices/pci0000:00/0000:00:02.0", flags: isPCI, vendor: "0x8086", device: "0x1234", numa: 0,
		minors: []minor{{kind: kindPrimary, index: 0, inDev: true}, {kind: kindRender, index: 128}}}}, true))
	f.Add([]byte{0, 1, 1, 'x', 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		facts, full, err := decodeFacts(b)
		n, cerr := count(b, filter{want: []string{sysfs.Primary}, wants: [3]bool{true}})
		if (err == nil) != (cerr == nil) {
			t.Fatalf("decodeFacts err %v, count err %v", err, cerr)
		}
		if err != nil {
			return
		}
		if again := encodeFacts(facts, full); !bytes.Equal(again, b) && len(facts) > 0 {
			// Varints have more than one spelling; the facts must still agree.
			if re, _, err := decodeFacts(again); err != nil || !reflect.DeepEqual(re, facts) {
				t.Fatalf("re-encoding changed the facts")
			}
		}
		usable := 0
		for _, g := range judge(facts, filter{want: []string{sysfs.Primary}, wants: [3]bool{true}}) {
			if g.Reason == "" {
				usable++
			}
		}
		if n != usable {
			t.Fatalf("count %d, judge %d", n, usable)
		}
		if got := tallyOf(facts).usable(1 << kindPrimary); got != n {
			t.Fatalf("tally %d, count %d", got, n)
		}
	})
}

// TestPluginDiscover: the plugin's discovery hands pool only the usable
// devices, and its DEVICES inventory lists all with their reasons.
func TestPluginDiscover(t *testing.T) {
	h := buildHost(t, testHost)
	p := makePlugin(h.Root, t.TempDir(), filterOf(t, `{}`))
	devs, err := p.Discover(t.Context(), nil, pool.Scan{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, d := range devs {
		keys = append(keys, d.Key)
	}
	slices.Sort(keys)
	if want := []string{"0000:03:00.0", "0000:04:00.0"}; !slices.Equal(keys, want) { // not the display-only platformKey
		t.Errorf("discover = %v, want %v", keys, want)
	}
	infos, err := p.Inventory(t.Context(), nil)
	if err != nil || len(infos) != 6 {
		t.Fatalf("inventory = %d devices, %v", len(infos), err)
	}
	for _, d := range infos {
		if d.Usable != (d.Reason == "") || len(d.Nodes) == 0 || strings.Contains(d.Key, "\n") {
			t.Errorf("DEVICES entry %+v", d)
		}
	}
}

// TestCapacityFromHead: INFO without filters answers from the tally in
// the cache's head, not reading the body, so a damaged body does not
// change its answer; the next command that needs the facts finds the
// damage and rebuilds the file. INFO with filters counts the facts.
func TestCapacityFromHead(t *testing.T) {
	h := buildHost(t, testHost)
	long := time.Now().Add(-time.Hour) // a /dev/dri time that proves something (not racy)
	if err := os.Chtimes(h.Dev("dri"), long, long); err != nil {
		t.Fatal(err)
	}
	p := makePlugin(h.Root, t.TempDir(), filterOf(t, `{}`))
	if n, err := p.Capacity(t.Context(), nil); err != nil || n != 2 {
		t.Fatalf("INFO on a miss = %d %v", n, err)
	}
	good, err := os.ReadFile(p.cache.Path())
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0x40
	if err := os.WriteFile(p.cache.Path(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Capacity(t.Context(), nil); err != nil || n != 2 {
		t.Fatalf("INFO from the head = %d %v", n, err)
	}
	if now, _ := os.ReadFile(p.cache.Path()); !bytes.Equal(now, bad) {
		t.Fatal("INFO without filters read past the head")
	}
	p.filter = filterOf(t, `{"vendorid_whitelist":["0x10de"]}`)
	if n, err := p.Capacity(t.Context(), nil); err != nil || n != 1 {
		t.Fatalf("INFO with a whitelist = %d %v", n, err)
	}
	if now, _ := os.ReadFile(p.cache.Path()); bytes.Equal(now, bad) {
		t.Fatal("a damaged body was not rebuilt")
	}
}

// benchHost is a host of n GPUs.
func benchHost(b *testing.B, n int) *sysfs.Host {
	var h fixture.Host
	for i := range n {
		h.GPUs = append(h.GPUs, fixture.GPU{
			Addr: fmt.Sprintf("0000:%02x:%02x.0", 0x10+i/32, i%32), Vendor: "0x10de", Device: "0x2330",
			NUMA: fixture.Int(i % 4), Driver: "nvidia", Card: i, Render: 128 + i, Control: -1,
		})
	}
	return buildHost(b, h)
}

// BenchmarkScan is discovery on a cache miss: every device read from the
// host.
func BenchmarkScan(b *testing.B) {
	for _, n := range []int{8, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			root := benchHost(b, n).Root
			for b.Loop() {
				facts, err := scan(sysfs.NewHost(root), false)
				if err != nil || len(facts) != n {
					b.Fatal(err, len(facts))
				}
			}
		})
	}
}

// BenchmarkCount is INFO's work on a cache hit: counting the usable
// devices in the cached facts.
func BenchmarkCount(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			facts, err := scan(benchHost(b, n), true)
			if err != nil {
				b.Fatal(err)
			}
			enc := encodeFacts(facts, true)
			f, _, _ := args{}.validate()
			for b.Loop() {
				if got, err := count(enc, f); err != nil || got != n {
					b.Fatal(got, err)
				}
			}
		})
	}
}
