package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
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
