package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// gpuAt returns a PCI GPU with card N and renderD(128+N) on a NUMA node.
func gpuAt(addr, vendor string, numa, card int) fixture.GPU {
	return fixture.GPU{Addr: addr, Vendor: vendor, Device: "0x1111", NUMA: fixture.Int(numa), Driver: "gpudrv", Card: card, Render: 128 + card, Control: -1}
}

// eightGPUs: cards 0-3 from vendor 0x10de on node 0, 4-7 from 0x1002 on
// node 1.
func eightGPUs() fixture.Host {
	var h fixture.Host
	for i := range 8 {
		vendor, node := "0x10de", 0
		if i >= 4 {
			vendor, node = "0x1002", 1
		}
		h.GPUs = append(h.GPUs, gpuAt(fmt.Sprintf("0000:%02x:00.0", 0x10+i), vendor, node, i))
	}
	return h
}

// specGPUHost has one GPU of the spec config's vendor as card0, an Intel
// iGPU and a GPU of another vendor.
var specGPUHost = fixture.Host{GPUs: []fixture.GPU{
	gpuAt("0000:03:00.0", "0x1234", 0, 0),
	gpuAt("0000:00:02.0", "0x8086", -1, 1),
	gpuAt("0000:04:00.0", "0x2345", 0, 2),
	gpuAt("0000:05:00.0", "0x10DE", 0, 3),
}}

func drmConf(args string) string {
	return `{"cdiVersion":"0.0.2","name":"gpus","type":"gpu","plugin":"drm","args":` + args + `}`
}

func TestDRMSpecExamples(t *testing.T) {
	n := newNode(t, specGPUHost)
	conf := readConf(t, "drm.conf")
	n.goldenSteps(t, "drm", conf, []goldenStep{
		{"version", env("CDI_COMMAND=VERSION"), 0},
		{"drm_info", env("CDI_COMMAND=INFO"), 0},
		{"drm_add", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=1234"), 0},
		{"drm_error_subtype", env("CDI_VERSION=0.0.1", "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1,gpu-memory:2048Mi", "CDI_REQUEST_ID=3456"), 1},
		{"error_version", env("CDI_VERSION=0.999", "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=1"), 1},
		{"error_version", env("CDI_VERSION=0.999"), 1}, // exactly the spec's example: no command at all
		{"error_command", env("CDI_VERSION=0.0.1", "CDI_COMMAND=MYCMD"), 1},
		{"del_ok", env("CDI_VERSION=0.0.1", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=1234"), 0},
		{"del_unknown", env("CDI_VERSION=0.0.1", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=3456"), 0},
	})
}

// What each kind of machine offers under each config: INFO's count and the
// devices of one ADD asking for everything.
func TestDRMHosts(t *testing.T) {
	igpu := fixture.Host{GPUs: []fixture.GPU{gpuAt("0000:00:02.0", "0x8086", -1, 0)}}
	noRender := fixture.Host{GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x1234", Device: "0x1", NUMA: fixture.Int(0), Driver: "d", Card: 0, Render: -1, Control: -1},
		gpuAt("0000:04:00.0", "0x1234", 0, 1),
	}}
	withControl := fixture.Host{GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x1234", Device: "0x1", NUMA: fixture.Int(0), Driver: "d", Card: 0, Render: 128, Control: 64},
	}}
	renumbered := fixture.Host{GPUs: []fixture.GPU{
		gpuAt("0000:03:00.0", "0x1234", 0, 2),
		gpuAt("0000:04:00.0", "0x1234", 0, 0),
		gpuAt("0000:05:00.0", "0x1234", 0, 1),
	}}
	sriov := fixture.Host{GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915", Card: 0, Render: 128, Control: -1, TotalVFs: 8, NumVFs: 4},
		{Addr: "0000:03:00.1", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915", Card: 1, Render: 129, Control: -1, PhysFn: "0000:03:00.0"},
		{Addr: "0000:03:00.2", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915", Card: 2, Render: 130, Control: -1, PhysFn: "0000:03:00.0"},
		{Addr: "0000:03:00.3", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915", Card: 3, Render: 131, Control: -1, PhysFn: "0000:03:00.0"},
		{Addr: "0000:03:00.4", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0), Driver: "i915", Card: 4, Render: 132, Control: -1, PhysFn: "0000:03:00.0"},
		gpuAt("0000:04:00.0", "0x8086", 0, 5),
	}}
	platform := fixture.Host{
		GPUs:         []fixture.GPU{gpuAt("0000:04:00.0", "0x1234", 0, 1)},
		PlatformGPUs: []fixture.PlatformGPU{{Path: "platform/simple-framebuffer.0", Card: 0, Render: -1}},
	}
	missingDev := fixture.Host{GPUs: []fixture.GPU{
		{Addr: "0000:03:00.0", Vendor: "0x1234", Device: "0x1", NUMA: fixture.Int(0), Driver: "d", Card: 0, Render: 128, Control: -1, NoDevNode: true},
		gpuAt("0000:04:00.0", "0x1234", 0, 1),
	}}
	tests := []struct {
		name string
		host fixture.Host
		args string
		info int
		add  string // devices of ADD gpu:<info>, space separated
	}{
		{"iGPU", igpu, `{}`, 1, "/dev/dri/card0 /dev/dri/renderD128"},
		{"iGPU render only", igpu, `{"want_device_nodes":["render"]}`, 1, "/dev/dri/renderD128"},
		{"node order follows want_device_nodes", igpu, `{"want_device_nodes":["render","primary"]}`, 1, "/dev/dri/renderD128 /dev/dri/card0"},
		{"iGPU filtered by vendor", igpu, `{"vendorid_whitelist":["0x10de"]}`, 0, ""},
		{"vendor case-insensitive", igpu, `{"vendorid_whitelist":["0X8086"]}`, 1, "/dev/dri/card0 /dev/dri/renderD128"},
		{"device whitelist", igpu, `{"deviceid_whitelist":["0x1111"]}`, 1, "/dev/dri/card0 /dev/dri/renderD128"},
		{"device whitelist miss", igpu, `{"deviceid_whitelist":["0x2222"]}`, 0, ""},
		{"two vendors", eightGPUs(), `{"vendorid_whitelist":["0x1002"]}`, 4, "/dev/dri/card4 /dev/dri/renderD132 /dev/dri/card5 /dev/dri/renderD133 /dev/dri/card6 /dev/dri/renderD134 /dev/dri/card7 /dev/dri/renderD135"},
		{"display-only card is no GPU to the default config", noRender, `{}`, 1, "/dev/dri/card1 /dev/dri/renderD129"},
		{"display-only card is handed out for its primary node", noRender, `{"want_device_nodes":["primary"]}`, 2, "/dev/dri/card0 /dev/dri/card1"},
		{"display-only card is not a render GPU", noRender, `{"want_device_nodes":["render"]}`, 1, "/dev/dri/renderD129"},
		{"control node", withControl, `{"want_device_nodes":["primary","render","control"]}`, 1, "/dev/dri/card0 /dev/dri/renderD128 /dev/dri/controlD64"},
		{"card order, not PCI order", renumbered, `{}`, 3, "/dev/dri/card0 /dev/dri/renderD128 /dev/dri/card1 /dev/dri/renderD129 /dev/dri/card2 /dev/dri/renderD130"},
		{"PF with VFs and the VFs are not handed out", sriov, `{}`, 1, "/dev/dri/card5 /dev/dri/renderD133"},
		{"a VF named in pci_addresses is", sriov, `{"pci_addresses":["0000:03:00.2"]}`, 1, "/dev/dri/card2 /dev/dri/renderD130"},
		{"pci_addresses never yields the busy PF", sriov, `{"pci_addresses":["0000:03:00.0","0000:03:00.3"]}`, 1, "/dev/dri/card3 /dev/dri/renderD131"},
		{"display-only platform device is left out", platform, `{}`, 1, "/dev/dri/card1 /dev/dri/renderD129"},
		{"platform device without filters", platform, `{"want_device_nodes":["primary"]}`, 2, "/dev/dri/card0 /dev/dri/card1"},
		{"platform device excluded by whitelist", platform, `{"vendorid_whitelist":["0x1234"]}`, 1, "/dev/dri/card1 /dev/dri/renderD129"},
		{"missing /dev node", missingDev, `{}`, 1, "/dev/dri/card1 /dev/dri/renderD129"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.host)
			conf := drmConf(tt.args)
			r := n.run("drm", conf, "CDI_COMMAND=INFO")
			if got := r.obj(t)["gpu"]; got != float64(tt.info) {
				t.Fatalf("INFO gpu = %v, want %d\n%s%s", got, tt.info, r.stdout, r.stderr)
			}
			if tt.info == 0 {
				if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a"); r.code(t) != 103 {
					t.Fatalf("ADD on empty host: %s", r.stdout)
				}
				return
			}
			r = n.run("drm", conf, "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=gpu:%d", tt.info), "CDI_REQUEST_ID=a")
			if got := strings.Join(r.devices(t), " "); got != tt.add {
				t.Fatalf("ADD devices:\n got %s\nwant %s", got, tt.add)
			}
			if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=b"); r.code(t) != 103 {
				t.Fatalf("ADD beyond capacity: %s", r.stdout)
			}
		})
	}
}

func TestDRMArgErrors(t *testing.T) {
	n := newNode(t, eightGPUs())
	for _, args := range []string{
		`{"want_device_types":["primary"]}`,
		`{"want_device_nodes":["primary","renderer"]}`,
		`{"want_device_nodes":[],"companion_nodes":"none"}`,
		`{"want_device_nodes":["render","render"]}`,
		`{"vendorid_whitelist":["10de"]}`,
		`{"vendorid_whitelist":["0x10dex"]}`,
		`{"deviceid_whitelist":"0x10de"}`,
		`{"pci_addresses":["03:00.0"]}`,
		`{"numa_policy":"strictly"}`,
		`{"mode":"compute"}`,
		`[]`,
	} {
		r := n.run("drm", drmConf(args), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
		if r.status != 1 || r.code(t) != 101 {
			t.Errorf("args %s: status %d\n%s", args, r.status, r.stdout)
		}
	}
	r := n.run("drm", drmConf(`{"want_device_types":["primary"]}`), "CDI_COMMAND=INFO")
	if !strings.Contains(r.stdout, "want_device_types") {
		t.Errorf("unknown arg not named: %s", r.stdout)
	}
}

// TestDRMModes: a config written before the mode arg keeps its meaning:
// each old shape of want_device_nodes answers INFO, DEVICES and ADD as
// the config that sets its mode does. A mode that want_device_nodes
// contradicts is code 101, the error naming both.
func TestDRMModes(t *testing.T) {
	for _, tt := range []struct {
		host      fixture.Host
		old, mode string
		request   string
	}{
		{fixture.DGXH100(), `{}`, `{"mode":"drm"}`, "gpu:2"},
		{fixture.DGXH100(), `{"want_device_nodes":["render"]}`, `{"mode":"drm","want_device_nodes":["render"]}`, "gpu:2"},
		{fixture.H200VM(), `{"want_device_nodes":[]}`, `{"mode":"nvidia-compute"}`, "gpu:1"},
		{fixture.H200VM(), `{"want_device_nodes":[]}`, `{"mode":"nvidia-compute","want_device_nodes":[]}`, "gpu:1"},
		{fixture.VFIOHost(), `{"want_device_nodes":["vfio"]}`, `{"mode":"vfio"}`, "gpu:2"},
		{fixture.VFIOHost(), `{"want_device_nodes":["iommufd"]}`, `{"mode":"iommufd"}`, "gpu:2"},
	} {
		var answers [2][]string
		for i, args := range []string{tt.old, tt.mode} {
			n := newNode(t, tt.host)
			for _, env := range [][]string{
				{"CDI_COMMAND=INFO"},
				{"CDI_COMMAND=DEVICES"},
				{"CDI_COMMAND=ADD", "CDI_REQUEST=" + tt.request, "CDI_REQUEST_ID=a"},
			} {
				r := n.run("drm", drmConf(args), env...)
				if r.status != 0 { // an ADD that succeeds: GPUs to compare
					t.Fatalf("%s %v: status %d\n%s", args, env, r.status, r.stdout)
				}
				answers[i] = append(answers[i], r.stdout)
			}
		}
		for j := range answers[0] {
			if answers[0][j] != answers[1][j] {
				t.Errorf("%s and %s answer apart:\n%s\n%s", tt.old, tt.mode, answers[0][j], answers[1][j])
			}
		}
	}

	n := newNode(t, fixture.DGXH100())
	for _, args := range []string{
		`{"mode":"drm","want_device_nodes":[]}`,
		`{"mode":"drm","want_device_nodes":["vfio"]}`,
		`{"mode":"nvidia-compute","want_device_nodes":["render"]}`,
		`{"mode":"vfio","want_device_nodes":["iommufd"]}`,
		`{"mode":"iommufd","want_device_nodes":[]}`,
		`{"want_device_nodes":["vfio","render"]}`,
	} {
		r := n.run("drm", drmConf(args), "CDI_COMMAND=INFO")
		if r.status != 1 || r.code(t) != 101 || !strings.Contains(r.stdout, "mode") || !strings.Contains(r.stdout, "want_device_nodes") {
			t.Errorf("args %s: status %d; want code 101 naming mode and want_device_nodes\n%s", args, r.status, r.stdout)
		}
	}
}

func TestDRMNUMA(t *testing.T) {
	steps := []struct {
		name     string
		args     string
		id       string
		request  string
		locality string
		devices  string // cards only, space separated; "" for an error
		numa     string // printed numa_locality, "-" for absent
		code     int
	}{
		{"packs onto one node without locality", `{"want_device_nodes":["primary"]}`, "a", "gpu:2", "", "/dev/dri/card0 /dev/dri/card1", "-", 0},
		{"locality honoured", `{"want_device_nodes":["primary"]}`, "b", "gpu:2", "1", "/dev/dri/card4 /dev/dri/card5", "[1]", 0},
		{"strict refuses", `{"want_device_nodes":["primary"],"numa_policy":"strict"}`, "c", "gpu:3", "0", "", "", 105},
		{"strict satisfied", `{"want_device_nodes":["primary"],"numa_policy":"strict"}`, "d", "gpu:1", "1", "/dev/dri/card6", "[1]", 0},
		{"preferred falls back to the fewest other nodes", `{"want_device_nodes":["primary"]}`, "e", "gpu:3", "1", "/dev/dri/card2 /dev/dri/card3 /dev/dri/card7", "[0,1]", 0},
		{"replay keeps its devices", `{"want_device_nodes":["primary"]}`, "b", "gpu:2", "0", "/dev/dri/card4 /dev/dri/card5", "[1]", 0},
		{"nothing left", `{"want_device_nodes":["primary"]}`, "g", "gpu:1", "", "", "", 103},
	}
	n := newNode(t, eightGPUs())
	for _, s := range steps {
		e := []string{"CDI_COMMAND=ADD", "CDI_REQUEST=" + s.request, "CDI_REQUEST_ID=" + s.id}
		if s.locality != "" {
			e = append(e, "CDI_REQUEST_NUMA_LOCALITY="+s.locality)
		}
		r := n.run("drm", drmConf(s.args), e...)
		if s.code != 0 {
			if r.code(t) != s.code {
				t.Fatalf("%s: %s", s.name, r.stdout)
			}
			continue
		}
		if got := strings.Join(r.devices(t), " "); got != s.devices {
			t.Fatalf("%s: got %s, want %s", s.name, got, s.devices)
		}
		loc, ok := r.obj(t)["numa_locality"]
		got := "-"
		if ok {
			got = strings.ReplaceAll(fmt.Sprint(loc), " ", ",")
		}
		if got != s.numa {
			t.Fatalf("%s: numa_locality %s, want %s", s.name, got, s.numa)
		}
	}
	// Without locality, a request that one node can hold goes there whole,
	// even when lower card numbers are free on the other node.
	n = newNode(t, eightGPUs())
	n.run("drm", drmConf(`{}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
	r := n.run("drm", drmConf(`{"want_device_nodes":["primary"]}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:4", "CDI_REQUEST_ID=b")
	if got := strings.Join(r.devices(t), " "); got != "/dev/dri/card4 /dev/dri/card5 /dev/dri/card6 /dev/dri/card7" {
		t.Fatalf("packing: %s", got)
	}
	// Unknown NUMA nodes (-1) are left out of numa_locality.
	n = newNode(t, fixture.Host{GPUs: []fixture.GPU{gpuAt("0000:00:02.0", "0x8086", -1, 0)}})
	r = n.run("drm", drmConf(`{}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a", "CDI_REQUEST_NUMA_LOCALITY=0")
	if !strings.Contains(r.stdout, `"numa_locality": []`) {
		t.Fatalf("unknown node: %s", r.stdout)
	}
}

// 16 processes race for 8 GPUs.
func TestDRMConcurrentProcesses(t *testing.T) {
	n := newNode(t, eightGPUs())
	conf := drmConf(`{}`)
	results := make([]result, 16)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", fmt.Sprintf("CDI_REQUEST_ID=p%d", i))
		})
	}
	wg.Wait()
	cards := map[string]bool{}
	fails := 0
	for _, r := range results {
		if r.status != 0 {
			if r.code(t) != 103 {
				t.Fatalf("unexpected failure: %s%s", r.stdout, r.stderr)
			}
			fails++
			continue
		}
		d := r.devices(t)
		if cards[d[0]] {
			t.Fatalf("%s handed out twice", d[0])
		}
		cards[d[0]] = true
	}
	if len(cards) != 8 || fails != 8 {
		t.Fatalf("%d successes, %d failures", len(cards), fails)
	}
	if recs := n.records("drm"); len(recs) != 8 {
		t.Fatalf("store holds %d records", len(recs))
	}
}

// After a reboot the cards are numbered differently; the store keys GPUs by
// PCI address, so the allocated GPU stays taken under its new name.
func TestDRMRenumbering(t *testing.T) {
	h := fixture.Host{GPUs: []fixture.GPU{
		gpuAt("0000:03:00.0", "0x1234", 0, 0),
		gpuAt("0000:04:00.0", "0x1234", 0, 1),
		gpuAt("0000:05:00.0", "0x1234", 0, 2),
	}}
	n := newNode(t, h)
	conf := drmConf(`{}`)
	if d := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a").devices(t); d[0] != "/dev/dri/card0" {
		t.Fatalf("got %v", d)
	}
	// Reboot: 03:00.0 becomes card2, 05:00.0 becomes card0.
	if err := os.RemoveAll(n.root); err != nil {
		t.Fatal(err)
	}
	h.GPUs[0].Card, h.GPUs[0].Render = 2, 130
	h.GPUs[2].Card, h.GPUs[2].Render = 0, 128
	if err := h.Build(n.root); err != nil {
		t.Fatal(err)
	}
	// The replay reports the GPU's new nodes.
	if d := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a").devices(t); strings.Join(d, " ") != "/dev/dri/card2 /dev/dri/renderD130" {
		t.Fatalf("replay after renumbering: %v", d)
	}
	// card0 is now the free 05:00.0.
	if d := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:2", "CDI_REQUEST_ID=b").devices(t); strings.Join(d, " ") != "/dev/dri/card0 /dev/dri/renderD128 /dev/dri/card1 /dev/dri/renderD129" {
		t.Fatalf("free set after renumbering: %v", d)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"); r.stdout != "" {
		t.Fatal(r.stdout)
	}
	if d := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=c").devices(t); d[0] != "/dev/dri/card2" {
		t.Fatalf("DEL freed the wrong GPU: %v", d)
	}
}

// A GPU unplugged while allocated stays recorded until DEL, and is neither
// counted nor handed out.
func TestDRMHotUnplug(t *testing.T) {
	n := newNode(t, eightGPUs())
	conf := drmConf(`{}`)
	d := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a").devices(t)
	if d[0] != "/dev/dri/card0" {
		t.Fatal(d)
	}
	for _, p := range []string{"sys/class/drm/card0", "sys/class/drm/renderD128", "sys/bus/pci/devices/0000:10:00.0", "dev/dri/card0", "dev/dri/renderD128"} {
		if err := os.Remove(filepath.Join(n.root, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(n.root, "sys/devices/pci0000:10")); err != nil {
		t.Fatal(err)
	}
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["gpu"]; got != float64(7) {
		t.Fatalf("INFO = %v", got)
	}
	if recs := n.records("drm"); recs["a"] == nil {
		t.Fatal("record of the unplugged GPU was dropped")
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:8", "CDI_REQUEST_ID=b"); r.code(t) != 103 {
		t.Fatalf("ADD counted the unplugged GPU: %s", r.stdout)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"); r.stdout != "" || r.status != 0 {
		t.Fatal(r.stdout)
	}
	if recs := n.records("drm"); len(recs) != 0 {
		t.Fatal(recs)
	}
}
