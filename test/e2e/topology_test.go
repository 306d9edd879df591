package e2e

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// ringRows is an asymmetric 4-node distance matrix, like an EPYC-style ring
// walked one way: from node i, node i+1 is 16 away, i+2 22 and i+3 28
// (mod 4). Node 1's nearest other node is 2; node 0, the lowest-numbered,
// is its farthest.
func ringRows() [][]int {
	rows := make([][]int, 4)
	for i := range rows {
		for j := range 4 {
			rows[i] = append(rows[i], 10+6*((j-i+4)%4))
		}
	}
	return rows
}

// switchGPU is a GPU on its own downstream port of a PCIe switch.
func switchGPU(addr string, numa, card int, bridges ...string) fixture.GPU {
	g := gpuAt(addr, "0x10de", numa, card)
	g.Bridges = bridges
	return g
}

// topologyHost is a 2-socket, 4-node host. Each socket's root complex
// (pci0000:00 on node 0, pci0000:80 on node 2) has two root ports, each
// with a switch whose two downstream ports hold a GPU: cards 0-1 under
// switch A, 2-3 under B, 4-5 under C, 6-7 under D. Nodes 1 and 3 hold no
// GPU. USB serial adapters: ttyUSB0 and ttyUSB2 on one controller of node
// 0, ttyUSB1 and ttyUSB3 on another, ttyUSB4 on node 2. withDistances
// false leaves every distance file out.
func topologyHost(withDistances bool) fixture.Host {
	h := fixture.Host{}
	for i, row := range ringRows() {
		n := fixture.NUMANode{CPUs: fmt.Sprintf("%d-%d", 8*i, 8*i+7), MemoryMiB: 4096 * (i + 1)}
		if withDistances {
			n.Distances = row
		}
		h.NUMA = append(h.NUMA, n)
	}
	card := 0
	for _, socket := range []struct {
		rc   int
		numa int
	}{{0x00, 0}, {0x80, 2}} {
		for sw, port := range []int{1, 3} {
			bus := socket.rc + 1 + 4*sw
			rp := fmt.Sprintf("0000:%02x:%02x.0", socket.rc, port)
			usp := fmt.Sprintf("0000:%02x:00.0", bus)
			for dsp := range 2 {
				down := fmt.Sprintf("0000:%02x:%02x.0", bus+1, dsp)
				addr := fmt.Sprintf("0000:%02x:00.0", bus+2+dsp)
				h.GPUs = append(h.GPUs, switchGPU(addr, socket.numa, card, rp, usp, down))
				card++
			}
		}
	}
	h.USBHosts = []fixture.USBHost{
		{Addr: "0000:00:14.0", NUMA: fixture.Int(0), TTYs: []int{0, 2}},
		{Addr: "0000:00:15.0", NUMA: fixture.Int(0), TTYs: []int{1, 3}},
		{Addr: "0000:80:14.0", NUMA: fixture.Int(2), TTYs: []int{4}},
	}
	return h
}

const usbConf = `{"cdiVersion":"0.0.2","name":"serial","type":"serial","plugin":"generic-tty","args":{"pattern":"ttyUSB"%s}}`

func TestTopologyChoice(t *testing.T) {
	strictGPU := drmConf(`{"numa_policy":"strict"}`)
	strictUSB := fmt.Sprintf(usbConf, `,"numa_policy":"strict"`)
	type step struct {
		request, locality string
		want              string // devices, space separated, or "code N"
	}
	tests := []struct {
		name      string
		distances bool
		plugin    string
		conf      string
		steps     []step
	}{
		{"gpu:2 lands under one switch", true, "drm", drmConf(`{"want_device_nodes":["primary"]}`), []step{
			{"gpu:1", "", "/dev/dri/card0"},
			{"gpu:2", "", "/dev/dri/card2 /dev/dri/card3"}, // not card1 (switch A) and card2 (switch B)
			{"gpu:1", "", "/dev/dri/card1"},
		}},
		{"locality falls back to the nearest node", true, "drm", drmConf(`{"want_device_nodes":["primary"]}`), []step{
			{"gpu:2", "1", "/dev/dri/card4 /dev/dri/card5"}, // node 2, not node 0
		}},
		{"without distances the fallback is as before", false, "drm", drmConf(`{"want_device_nodes":["primary"]}`), []step{
			{"gpu:2", "1", "/dev/dri/card0 /dev/dri/card1"},
		}},
		{"listed node first, then the nearest", true, "drm", drmConf(`{"want_device_nodes":["primary"]}`), []step{
			{"gpu:5", "2", "/dev/dri/card0 /dev/dri/card4 /dev/dri/card5 /dev/dri/card6 /dev/dri/card7"},
		}},
		{"strict still refuses", true, "drm", strictGPU, []step{
			{"gpu:1", "1", "code 105"},
			{"gpu:5", "0", "code 105"},
			{"gpu:4", "0", "/dev/dri/card0 /dev/dri/renderD128 /dev/dri/card1 /dev/dri/renderD129 /dev/dri/card2 /dev/dri/renderD130 /dev/dri/card3 /dev/dri/renderD131"},
		}},
		{"serial:2 lands on one controller", true, "generic-tty", fmt.Sprintf(usbConf, ""), []step{
			{"serial:2", "", "/dev/ttyUSB0 /dev/ttyUSB2"},
		}},
		{"serial locality falls back to the nearest node", true, "generic-tty", fmt.Sprintf(usbConf, ""), []step{
			{"serial:1", "1", "/dev/ttyUSB4"},
		}},
		{"serial without distances as before", false, "generic-tty", fmt.Sprintf(usbConf, ""), []step{
			{"serial:1", "1", "/dev/ttyUSB0"},
		}},
		{"serial strict still refuses", true, "generic-tty", strictUSB, []step{
			{"serial:1", "1", "code 105"},
			{"serial:1", "2", "/dev/ttyUSB4"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, topologyHost(tt.distances))
			for i, s := range tt.steps {
				r := n.run(tt.plugin, tt.conf, env("CDI_VERSION=0.0.2", "CDI_COMMAND=ADD", "CDI_REQUEST="+s.request,
					fmt.Sprintf("CDI_REQUEST_ID=req-%d", i), "CDI_REQUEST_NUMA_LOCALITY="+s.locality)...)
				got := fmt.Sprintf("code %d", r.code(t))
				if r.status == 0 {
					got = strings.Join(r.devices(t), " ")
				}
				if got != s.want {
					t.Fatalf("step %d (%s, locality %q): got %s, want %s\n%s", i, s.request, s.locality, got, s.want, r.stderr)
				}
			}
		})
	}
}

// The answer to a NUMA request lists the nodes the devices came from.
func TestTopologyLocalityAnswer(t *testing.T) {
	n := newNode(t, topologyHost(true))
	r := n.run("generic-tty", fmt.Sprintf(usbConf, ""), "CDI_VERSION=0.0.2", "CDI_COMMAND=ADD", "CDI_REQUEST=serial:2",
		"CDI_REQUEST_ID=a", "CDI_REQUEST_NUMA_LOCALITY=2")
	if got := r.obj(t)["numa_locality"]; !reflect.DeepEqual(got, []any{0.0, 2.0}) {
		t.Fatalf("numa_locality = %v\n%s", got, r.stdout)
	}
}

// DEVICES gives each device's root complex and the bridges above it.
func TestTopologyDevices(t *testing.T) {
	n := newNode(t, topologyHost(true))
	type dev struct {
		Key     string   `json:"key"`
		NUMA    int      `json:"numa"`
		Root    string   `json:"pcieRoot"`
		Bridges []string `json:"pcieBridges"`
	}
	list := func(plugin, conf string) map[string]dev {
		r := n.run(plugin, conf, "CDI_VERSION=0.0.2", "CDI_COMMAND=DEVICES")
		var out struct{ Devices []dev }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.status != 0 {
			t.Fatalf("DEVICES: %v\n%s%s", err, r.stdout, r.stderr)
		}
		m := map[string]dev{}
		for _, d := range out.Devices {
			m[d.Key] = d
		}
		return m
	}
	gpus := list("drm", drmConf(`{}`))
	want := dev{"0000:88:00.0", 2, "pci0000:80", []string{"0000:80:03.0", "0000:85:00.0", "0000:86:01.0"}}
	if got := gpus["0000:88:00.0"]; !reflect.DeepEqual(got, want) {
		t.Errorf("drm DEVICES: got %+v, want %+v", got, want)
	}
	ttys := list("generic-tty", fmt.Sprintf(usbConf, ""))
	want = dev{"ttyUSB1", 0, "pci0000:00", []string{"0000:00:15.0"}}
	if got := ttys["ttyUSB1"]; !reflect.DeepEqual(got, want) {
		t.Errorf("generic-tty DEVICES: got %+v, want %+v", got, want)
	}
}

// topo is the JSON of `cdictl topology`.
type topo struct {
	NUMA  bool `json:"numa"`
	Nodes []struct {
		ID          int      `json:"id"`
		CPUs        string   `json:"cpus"`
		MemoryBytes int64    `json:"memoryBytes"`
		Distances   []int    `json:"distances"`
		PCIeRoots   []string `json:"pcieRoots"`
		Devices     []struct {
			Type string `json:"type"`
			Key  string `json:"key"`
		} `json:"devices"`
	} `json:"nodes"`
	Unplaced struct {
		PCIeRoots []string `json:"pcieRoots"`
		Devices   []any    `json:"devices"`
	} `json:"unplaced"`
}

// nodeView is what a test expects of one node.
type nodeView struct {
	cpus  string
	mib   int64
	dist  []int
	roots []string
	keys  string // "type:key" of its devices, sorted, space separated
}

func viewOf(t topo, i int) nodeView {
	n := t.Nodes[i]
	var keys []string
	for _, d := range n.Devices {
		keys = append(keys, d.Type+":"+d.Key)
	}
	slices.Sort(keys)
	return nodeView{n.CPUs, n.MemoryBytes >> 20, n.Distances, n.PCIeRoots, strings.Join(keys, " ")}
}

var topoConfs = map[string]string{
	"gpu.d/drm.conf":            drmConf(`{}`),
	"serial.d/generic-tty.conf": fmt.Sprintf(usbConf, ""),
}

// cdictl topology shows nodes with their CPUs, memory, distances, root
// complexes and devices; without distance files, no distances; without
// node directories, one node holding everything.
func TestCdictlTopology(t *testing.T) {
	node0 := "gpu:0000:03:00.0 gpu:0000:04:00.0 gpu:0000:07:00.0 gpu:0000:08:00.0 serial:ttyUSB0 serial:ttyUSB1 serial:ttyUSB2 serial:ttyUSB3"
	node2 := "gpu:0000:83:00.0 gpu:0000:84:00.0 gpu:0000:87:00.0 gpu:0000:88:00.0 serial:ttyUSB4"
	vm := fixture.Host{CPUs: 4, MemoryMiB: 2048, GPUs: []fixture.GPU{gpuAt("0000:00:02.0", "0x8086", -1, 0)},
		USBHosts: []fixture.USBHost{{Addr: "0000:00:14.0", NUMA: fixture.Int(-1), TTYs: []int{0}}}}
	tests := []struct {
		name  string
		host  fixture.Host
		numa  bool
		nodes []nodeView
	}{
		{"four nodes", topologyHost(true), true, []nodeView{
			{"0-7", 4096, []int{10, 16, 22, 28}, []string{"pci0000:00"}, node0},
			{"8-15", 8192, []int{28, 10, 16, 22}, []string{}, ""},
			{"16-23", 12288, []int{22, 28, 10, 16}, []string{"pci0000:80"}, node2},
			{"24-31", 16384, []int{16, 22, 28, 10}, []string{}, ""},
		}},
		{"distance files missing", topologyHost(false), true, []nodeView{
			{"0-7", 4096, nil, []string{"pci0000:00"}, node0},
			{"8-15", 8192, nil, []string{}, ""},
			{"16-23", 12288, nil, []string{"pci0000:80"}, node2},
			{"24-31", 16384, nil, []string{}, ""},
		}},
		{"no NUMA information", vm, false, []nodeView{
			{"0-3", 2048, nil, []string{"pci0000:00"}, "gpu:0000:00:02.0 serial:ttyUSB0"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newCtlNode(t, tt.host, topoConfs)
			r := n.ctl("topology", "-o", "json")
			if r.status != 0 {
				t.Fatalf("status %d\n%s%s", r.status, r.stdout, r.stderr)
			}
			var got topo
			r.json(t, &got)
			if got.NUMA != tt.numa || len(got.Nodes) != len(tt.nodes) || len(got.Unplaced.Devices)+len(got.Unplaced.PCIeRoots) != 0 {
				t.Fatalf("numa %v, %d nodes, unplaced %+v\n%s", got.NUMA, len(got.Nodes), got.Unplaced, r.stdout)
			}
			for i, want := range tt.nodes {
				if v := viewOf(got, i); !reflect.DeepEqual(v, want) || got.Nodes[i].ID != i {
					t.Errorf("node %d: got %+v, want %+v", i, v, want)
				}
			}
		})
	}
}

// The table has a row per node and plugin, devices as ranges, each PCIe
// switch with the devices below it, and unusable devices grouped by why.
func TestCdictlTopologyTable(t *testing.T) {
	h := topologyHost(true)
	h.TTYs = map[string]int{"tty": 8}
	confs := map[string]string{"gpu.d/drm.conf": drmConf(`{}`), "tty.d/generic-tty.conf": readConf(t, "tty.conf")}
	r := newCtlNode(t, h, confs).ctl("topology", "-o", "table")
	want := [][]string{
		{"NODE", "CPUS", "MEMORY", "DISTANCES", "PCIE", "ROOTS", "PCIE", "SWITCHES", "TYPE", "PLUGIN", "DEVICES"},
		strings.Fields("0 0-7 4.0 GiB 10 16 22 28 pci0000:00 0000:01:00.0 (0000:03:00.0 0000:04:00.0) 0000:05:00.0 (0000:07:00.0 0000:08:00.0) gpu drm 0000:03:00.0 0000:04:00.0 0000:07:00.0 0000:08:00.0"),
		{"1", "8-15", "8.0", "GiB", "28", "10", "16", "22", "-", "-", "-", "-", "-"},
		strings.Fields("2 16-23 12.0 GiB 22 28 10 16 pci0000:80 0000:81:00.0 (0000:83:00.0 0000:84:00.0) 0000:85:00.0 (0000:87:00.0 0000:88:00.0) gpu drm 0000:83:00.0 0000:84:00.0 0000:87:00.0 0000:88:00.0"),
		{"3", "24-31", "16.0", "GiB", "16", "22", "28", "10", "-", "-", "-", "-", "-"},
		strings.Fields("? - - - - - tty generic-tty unusable, the current console, never handed out: tty0; unusable, reserved (num_system_reserved): tty1..tty7"),
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.status != 0 || len(lines) != len(want) {
		t.Fatalf("status %d, %d lines:\n%s%s", r.status, len(lines), r.stdout, r.stderr)
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d: got %q, want %q", i, got, w)
		}
	}
}

// The libraries for people are linked into cdictl only, never into the
// plugin binaries, which are on the hot path: ghw (topology), cobra and
// pflag (the command line) and YAML (-o yaml).
func TestPluginsDoNotLinkPeoplesLibraries(t *testing.T) {
	for _, mod := range []string{"github.com/jaypipes/ghw", "github.com/spf13/cobra", "github.com/spf13/pflag", "go.yaml.in/yaml/v3"} {
		for _, bin := range []string{"drm", "generic-tty", "sriov", "cdictl"} {
			if linked := links(t, bin, mod); linked != (bin == "cdictl") {
				t.Errorf("%s links %s: %v", bin, mod, linked)
			}
		}
	}
}

// The Kubernetes command's metrics and logging libraries stay in
// cdi-kubelet-plugin: pkg/caller's Observer is an interface, so neither
// the plugins nor cdictl link them.
func TestOnlyTheKubeletPluginLinksMetrics(t *testing.T) {
	for _, mod := range []string{"github.com/prometheus/client_golang", "k8s.io/component-base"} {
		for _, bin := range []string{"drm", "generic-tty", "sriov", "cdictl", "cdi-kubelet-plugin"} {
			if linked := links(t, bin, mod); linked != (bin == "cdi-kubelet-plugin") {
				t.Errorf("%s links %s: %v", bin, mod, linked)
			}
		}
	}
}

// links reports whether the binary bin links the module mod.
func links(t *testing.T, bin, mod string) bool {
	t.Helper()
	info, err := buildinfo.ReadFile(filepath.Join(binDir, bin))
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(info.Deps, func(m *debug.Module) bool { return m.Path == mod })
}
