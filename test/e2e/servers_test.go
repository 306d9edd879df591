package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// shippedDRMConf is the drm config the project installs
// (conf/gpu.d/drm.conf): want_device_nodes [primary, render].
func shippedDRMConf(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../conf/gpu.d/drm.conf")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gpuNodes is what drm hands out for cards of one vendor, in the order
// the protocol sets: each GPU's DRM nodes and own companion node, then the
// shared companions once.
func gpuNodes(cards []int, own func(card int) string, shared ...string) string {
	var out []string
	for _, c := range cards {
		out = append(out, fmt.Sprintf("/dev/dri/card%d", c), fmt.Sprintf("/dev/dri/renderD%d", 127+c))
		if own != nil {
			out = append(out, own(c))
		}
	}
	return strings.Join(append(out, shared...), " ")
}

var (
	nvidiaShared  = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
	dgxOwn        = func(card int) string { return fmt.Sprintf("/dev/nvidia%d", card-1) }
	mgaOwn        = func(card int) string { return fmt.Sprintf("/dev/nvidia%d", 5-card) }
	displayOnly   = "no render node: a display-only adapter"
	serverSockets = "[0 1]"
)

// TestServerHosts drives drm on hosts modelled on real GPU servers with
// the shipped config: the BMC's display adapter is never a GPU, gpu:2
// lands under one switch, gpu:N spans both sockets, the vendor's compute
// nodes come in order, and DEL frees everything.
func TestServerHosts(t *testing.T) {
	tests := []struct {
		name     string
		host     fixture.Host
		gpus     int
		bmc      string // the BMC's PCI address
		first    string // gpu:1 on an idle host
		pair     string // gpu:2 next: under one switch, or on one socket
		all      string // gpu:<gpus> on an idle host
		switched bool   // the GPUs sit under PCIe switches
	}{
		{"DGX-H100", fixture.DGXH100(), 8, "0000:03:00.0",
			gpuNodes([]int{1}, dgxOwn, nvidiaShared...),
			gpuNodes([]int{3, 4}, dgxOwn, nvidiaShared...),
			gpuNodes([]int{1, 2, 3, 4, 5, 6, 7, 8}, dgxOwn, nvidiaShared...), true},
		{"MI300X", fixture.MI300X(), 8, "0000:03:00.0",
			gpuNodes([]int{1}, nil, "/dev/kfd"),
			gpuNodes([]int{3, 4}, nil, "/dev/kfd"),
			gpuNodes([]int{1, 2, 3, 4, 5, 6, 7, 8}, nil, "/dev/kfd"), true},
		{"mgag200 server", fixture.MGAServer(), 4, "0000:00:05.0",
			gpuNodes([]int{1}, mgaOwn, nvidiaShared[:3]...),    // no nvidia-modeset on this host
			gpuNodes([]int{3, 4}, mgaOwn, nvidiaShared[:3]...), // node 1, where two are free
			gpuNodes([]int{1, 2, 3, 4}, mgaOwn, nvidiaShared[:3]...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.host)
			conf := shippedDRMConf(t)
			add := func(id, req string) result {
				t.Helper()
				return n.run("drm", conf, "CDI_VERSION=0.0.2", "CDI_COMMAND=ADD", "CDI_REQUEST="+req, "CDI_REQUEST_ID="+id)
			}
			if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["gpu"]; got != float64(tt.gpus) {
				t.Fatalf("INFO gpu = %v, want %d (the BMC is no GPU)", got, tt.gpus)
			}
			devs := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))
			bmc, ok := devs[tt.bmc]
			if !ok || bmc.Usable || bmc.Reason != displayOnly {
				t.Fatalf("BMC in DEVICES: %+v", bmc)
			}
			for key, d := range devs {
				if key != tt.bmc && (!d.Usable || (d.Switch != "") != tt.switched) {
					t.Errorf("GPU %s in DEVICES: %+v", key, d)
				}
			}
			steps := []struct{ id, req, want string }{{"a", "gpu:1", tt.first}, {"b", "gpu:2", tt.pair}}
			for _, s := range steps {
				if got := strings.Join(add(s.id, s.req).devices(t), " "); got != s.want {
					t.Fatalf("ADD %s:\n got %s\nwant %s", s.req, got, s.want)
				}
			}
			for _, id := range []string{"a", "b"} {
				if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID="+id); r.status != 0 || r.stdout != "" {
					t.Fatalf("DEL %s: %d %s", id, r.status, r.stdout)
				}
			}
			if recs := n.records("drm"); len(recs) != 0 {
				t.Fatalf("DEL left records: %v", recs)
			}
			r := add("c", fmt.Sprintf("gpu:%d", tt.gpus))
			if got := strings.Join(r.devices(t), " "); got != tt.all {
				t.Fatalf("ADD gpu:%d:\n got %s\nwant %s", tt.gpus, got, tt.all)
			}
			var numa []int
			for _, al := range n.records("drm")["c"].Allocations {
				for _, d := range al.Devices {
					if !slices.Contains(numa, d.NUMA) {
						numa = append(numa, d.NUMA)
					}
				}
			}
			if slices.Sort(numa); fmt.Sprint(numa) != serverSockets {
				t.Errorf("gpu:%d spans NUMA nodes %v, want both sockets", tt.gpus, numa)
			}
			if r := add("d", "gpu:1"); r.code(t) != 103 {
				t.Fatalf("ADD beyond the GPUs (the BMC left): %s", r.stdout)
			}
			n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=c")
			for key, d := range inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES")) {
				if d.HeldBy != "" {
					t.Errorf("%s still held by %s after DEL", key, d.HeldBy)
				}
			}
		})
	}
}

// invDevice is a DEVICES entry as these tests read it.
type invDevice struct {
	Key     string   `json:"key"`
	Nodes   []string `json:"nodes"`
	Usable  bool     `json:"usable"`
	Reason  string   `json:"reason"`
	HeldBy  string   `json:"heldBy"`
	Switch  string   `json:"pcieSwitch"`
	NoIOMMU bool     `json:"noiommu"`
}

func inventory(t *testing.T, r result) map[string]invDevice {
	t.Helper()
	var got struct{ Devices []invDevice }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.status != 0 {
		t.Fatalf("DEVICES: %v %d %s", err, r.status, r.stdout)
	}
	out := map[string]invDevice{}
	for _, d := range got.Devices {
		out[d.Key] = d
	}
	return out
}

// A display-only adapter is handed out to a config that wants only
// primary nodes; the shipped config never hands it out.
func TestDisplayOnlyWithPrimaryOnly(t *testing.T) {
	n := newNode(t, fixture.DGXH100())
	conf := drmConf(`{"want_device_nodes":["primary"],"companion_nodes":"none"}`)
	devs := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))
	if d := devs["0000:03:00.0"]; !d.Usable || !slices.Equal(d.Nodes, []string{"/dev/dri/card0"}) {
		t.Fatalf("BMC with want_device_nodes [primary]: %+v", d)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:9", "CDI_REQUEST_ID=a")
	if got := r.devices(t); len(got) != 9 || got[0] != "/dev/dri/card0" {
		t.Fatalf("gpu:9 with [primary]: %v", got)
	}
}

// On a workstation, two GPUs behind two root ports are exactly as far
// apart (PHB) as one behind a root port and the iGPU on the root bus: the
// lowest indices win, not the fewest hops.
func TestWorkstationLinkClass(t *testing.T) {
	for _, args := range []string{`{"want_device_nodes":["primary"]}`, `{}`} {
		t.Run(args, func(t *testing.T) {
			n := newNode(t, fixture.Workstation())
			conf := drmConf(args)
			first := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a").devices(t)
			if first[0] != "/dev/dri/card0" {
				t.Fatalf("gpu:1: %v", first)
			}
			got := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:2", "CDI_REQUEST_ID=b").devices(t)
			var cards []string
			for _, d := range got {
				if strings.HasPrefix(d, "/dev/dri/card") {
					cards = append(cards, d)
				}
			}
			if want := []string{"/dev/dri/card1", "/dev/dri/card2"}; !slices.Equal(cards, want) {
				t.Fatalf("gpu:2 gave %v, want %v (not the on-root-bus card6)", cards, want)
			}
		})
	}
}

// companion_nodes: "none" hands out the DRM nodes alone; anything but
// "auto" or "none" is refused as a bad config.
func TestCompanionNodesArg(t *testing.T) {
	n := newNode(t, fixture.DGXH100())
	r := n.run("drm", drmConf(`{"companion_nodes":"none"}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
	if got := strings.Join(r.devices(t), " "); got != "/dev/dri/card1 /dev/dri/renderD128" {
		t.Fatalf("companion_nodes none: %s", got)
	}
	bad := n.run("drm", drmConf(`{"companion_nodes":"all"}`), "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=b")
	if bad.status != 1 || bad.code(t) != n.run("drm", drmConf(`{"numa_policy":"sometimes"}`), "CDI_COMMAND=INFO").code(t) ||
		!strings.Contains(bad.stdout, "companion_nodes") {
		t.Fatalf("companion_nodes all: %s", bad.stdout)
	}
}

// A companion node is checked live: one that is no longer the character
// device the kernel describes keeps its GPU from being handed out, and
// ADD takes the next GPU instead.
func TestCompanionCheckedLive(t *testing.T) {
	n := newNode(t, fixture.DGXH100())
	conf := shippedDRMConf(t)
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["gpu"]; got != float64(8) {
		t.Fatalf("INFO: %v", got)
	}
	node := filepath.Join(n.root, "dev/nvidia0")
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(node, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
	if got := r.devices(t); got[0] != "/dev/dri/card2" || got[2] != "/dev/nvidia1" || !strings.Contains(r.stderr, "/dev/nvidia0 is not a character device") {
		t.Fatalf("ADD with a planted /dev/nvidia0: %v\n%s", got, r.stderr)
	}
	d := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))["0000:18:00.0"]
	if d.Usable || !strings.Contains(d.Reason, "/dev/nvidia0") {
		t.Fatalf("DEVICES of the GPU whose node was planted: %+v", d)
	}
}

// The real H200 server seen in docs/plugins.md had no DRM nodes: without
// nvidia-drm, DEVICES says so; with it, the GPU comes with the NVIDIA
// nodes that exist.
func TestH200Server(t *testing.T) {
	conf := shippedDRMConf(t)
	n := newNode(t, fixture.H200VM())
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["gpu"]; got != float64(0) {
		t.Fatalf("INFO without nvidia-drm: %v", got)
	}
	d := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))["0000:00:06.0"]
	if d.Usable || !strings.Contains(d.Reason, "nvidia-drm") {
		t.Fatalf("DEVICES without nvidia-drm: %+v", d)
	}
	h := fixture.H200VM()
	h.GPUs[0].Card, h.GPUs[0].Render = 0, 128
	n = newNode(t, h)
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=a")
	if got := strings.Join(r.devices(t), " "); got != "/dev/dri/card0 /dev/dri/renderD128 /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools" {
		t.Fatalf("ADD with nvidia-drm: %s", got)
	}
}

// The CDI spec carries the companion nodes, each once.
func TestCompanionsInCDISpec(t *testing.T) {
	n := newNode(t, fixture.MI300X())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := drmConf(`{"cdi_spec":{"kind":"example.com/gpu","dir":"` + dir + `"}}`)
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:2", "CDI_REQUEST_ID=pod1"); r.status != 0 {
		t.Fatalf("ADD: %s", r.stdout)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("spec files: %v %v", files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Devices []struct {
			Name           string
			ContainerEdits struct {
				DeviceNodes []struct{ Path string } `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("spec: %v %s", err, b)
	}
	got := map[string]string{}
	for _, d := range spec.Devices {
		var paths []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			paths = append(paths, n.Path)
		}
		got[d.Name] = strings.Join(paths, " ")
	}
	// The request's own entry: every node, the shared one once; each
	// device's entry (docs/cdi-bridge.md): its nodes and the shared ones.
	want := map[string]string{
		"pod1":              gpuNodes([]int{1, 2}, nil, "/dev/kfd"),
		"pod1_0000:08:00.0": gpuNodes([]int{1}, nil, "/dev/kfd"),
		"pod1_0000:09:00.0": gpuNodes([]int{2}, nil, "/dev/kfd"),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("spec entries:\n got %v\nwant %v", got, want)
	}
}

// cdictl shows the BMC as unusable, with its reason, and every GPU's
// switch, in devices and topology alike.
func TestCdictlOnDGX(t *testing.T) {
	n := newCtlNode(t, fixture.DGXH100(), map[string]string{"gpu.d/drm.conf": shippedDRMConf(t)})
	dev := n.ctl("devices", "-o", "table")
	if dev.status != 0 {
		t.Fatalf("devices: %d %s", dev.status, dev.stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(dev.stdout), "\n")[1:] {
		switch {
		case strings.Contains(line, "0000:03:00.0"):
			if !strings.Contains(line, "0000:02:00.0") || !strings.HasSuffix(line, "unusable: "+displayOnly) {
				t.Errorf("BMC row: %s", line)
			}
		case !strings.Contains(line, "0x10de:0x2330") || !strings.HasSuffix(line, "free"):
			t.Errorf("GPU row: %s", line)
		}
	}
	for _, sw := range []string{"0000:16:00.0", "0000:41:00.0", "0000:98:00.0", "0000:c1:00.0"} {
		if strings.Count(dev.stdout, sw) != 2 {
			t.Errorf("switch %s is not on its two GPUs' rows:\n%s", sw, dev.stdout)
		}
	}
	topo := n.ctl("topology", "-o", "table")
	for _, want := range []string{"unusable, " + displayOnly + ": 0000:03:00.0", "0000:16:00.0 (0000:18:00.0 0000:19:00.0)", "0000:c1:00.0 (0000:c3:00.0 0000:c4:00.0)"} {
		if topo.status != 0 || !strings.Contains(topo.stdout, want) {
			t.Errorf("topology lacks %q:\n%s%s", want, topo.stdout, topo.stderr)
		}
	}
}

// computeConf is the shipped example that hands NVIDIA GPUs out without
// DRM nodes (conf/examples/compute.d/nvidia-compute.conf), with args
// merged in.
func computeConf(t *testing.T, more string) string {
	t.Helper()
	b, err := os.ReadFile("../../conf/examples/compute.d/nvidia-compute.conf")
	if err != nil {
		t.Fatal(err)
	}
	if more == "" {
		return string(b)
	}
	return strings.Replace(string(b), `"mode": "nvidia-compute"`, `"mode": "nvidia-compute", `+more, 1)
}

// computeNodes are the nodes of NVIDIA GPUs handed out without DRM: each
// GPU's /dev/nvidia<minor>, then the shared nodes a host without
// nvidia-modeset has.
func computeNodes(minors ...int) string {
	var out []string
	for _, m := range minors {
		out = append(out, fmt.Sprintf("/dev/nvidia%d", m))
	}
	return strings.Join(append(out, nvidiaShared[:3]...), " ")
}

// On the H200 server as seen (no nvidia-drm), the compute example hands
// the GPU out as /dev/nvidia0 and the driver's shared nodes, and DEVICES
// carries its UUID; the default config's reason names the example.
func TestH200Compute(t *testing.T) {
	conf := computeConf(t, "")
	n := newNode(t, fixture.H200VM())
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["compute"]; got != float64(1) {
		t.Fatalf("INFO: %v", got)
	}
	var devs struct {
		Devices []struct {
			Key, UUID string
			Nodes     []string
			Usable    bool
		}
	}
	if err := json.Unmarshal([]byte(n.run("drm", conf, "CDI_COMMAND=DEVICES").stdout), &devs); err != nil || len(devs.Devices) != 1 {
		t.Fatalf("DEVICES: %v %+v", err, devs)
	}
	if d := devs.Devices[0]; d.Key != "0000:00:06.0" || d.UUID != "GPU-fixture-0000:00:06.0" || !d.Usable || strings.Join(d.Nodes, " ") != computeNodes(0) {
		t.Fatalf("DEVICES: %+v", d)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:1", "CDI_REQUEST_ID=a")
	if got := strings.Join(r.devices(t), " "); got != computeNodes(0) {
		t.Fatalf("ADD: %s", got)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:1", "CDI_REQUEST_ID=b"); r.code(t) != 103 {
		t.Fatalf("second ADD: %s", r.stdout)
	}
	d := inventory(t, n.run("drm", shippedDRMConf(t), "CDI_COMMAND=DEVICES"))["0000:00:06.0"]
	if d.Usable || !strings.Contains(d.Reason, "conf/examples/compute.d/nvidia-compute.conf") || d.HeldBy != "a" {
		t.Fatalf("DEVICES of the default config: %+v", d)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=a"); r.status != 0 {
		t.Fatalf("DEL: %s", r.stdout)
	}
}

// With nvidia-drm loaded, a GPU is one unit in drm's one store whichever
// config hands it out: held through its DRM nodes it is not handed out
// for compute, and the other way round. The compute config never hands
// out DRM nodes.
func TestComputeSharesStore(t *testing.T) {
	h := fixture.H200VM()
	h.GPUs[0].Card, h.GPUs[0].Render = 0, 128
	n := newNode(t, h)
	drm, compute := shippedDRMConf(t), computeConf(t, "")
	if r := n.run("drm", drm, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=gfx"); r.status != 0 {
		t.Fatalf("ADD through DRM: %s", r.stdout)
	}
	if got := n.run("drm", compute, "CDI_COMMAND=INFO").obj(t)["compute"]; got != float64(1) {
		t.Fatalf("INFO (capacity, held or not): %v", got)
	}
	if r := n.run("drm", compute, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:1", "CDI_REQUEST_ID=cuda"); r.code(t) != 103 {
		t.Fatalf("compute ADD of a GPU held through DRM: %s", r.stdout)
	}
	if d := inventory(t, n.run("drm", compute, "CDI_COMMAND=DEVICES"))["0000:00:06.0"]; d.HeldBy != "gfx" {
		t.Fatalf("compute DEVICES: %+v", d)
	}
	n.run("drm", drm, "CDI_COMMAND=DEL", "CDI_REQUEST_ID=gfx")
	r := n.run("drm", compute, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:1", "CDI_REQUEST_ID=cuda")
	if got := strings.Join(r.devices(t), " "); got != computeNodes(0) {
		t.Fatalf("compute ADD with nvidia-drm loaded: %s", got)
	}
	if r := n.run("drm", drm, "CDI_COMMAND=ADD", "CDI_REQUEST=gpu:1", "CDI_REQUEST_ID=gfx"); r.code(t) != 103 {
		t.Fatalf("DRM ADD of a GPU held for compute: %s", r.stdout)
	}
}

// A GKE-like node: 8 GPUs without DRM, two sockets. gpu:8 comes in minor
// order, each GPU's own node then the shared nodes once; a NUMA request
// gets the GPUs of its socket; the default config lists all 8 unusable.
func TestGKECompute(t *testing.T) {
	n := newNode(t, fixture.GKEA3())
	conf := computeConf(t, "")
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:2", "CDI_REQUEST_ID=a", "CDI_REQUEST_NUMA_LOCALITY=1")
	if got := strings.Join(r.devices(t), " "); got != computeNodes(4, 5) {
		t.Fatalf("ADD compute:2 on node 1: %s", got)
	}
	r = n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=compute:6", "CDI_REQUEST_ID=b")
	if got := strings.Join(r.devices(t), " "); got != computeNodes(0, 1, 2, 3, 6, 7) {
		t.Fatalf("ADD compute:6: %s", got)
	}
	devs := inventory(t, n.run("drm", shippedDRMConf(t), "CDI_COMMAND=DEVICES"))
	if len(devs) != 8 {
		t.Fatalf("default config's DEVICES: %v", devs)
	}
	for k, d := range devs {
		if d.Usable || !strings.Contains(d.Reason, "nvidia-compute.conf") {
			t.Errorf("%s: %+v", k, d)
		}
	}
}
