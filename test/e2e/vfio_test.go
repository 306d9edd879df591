package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// pgpuConf is the shipped example for GPUs bound to vfio-pci
// (conf/examples/pgpu.d/pgpu.conf) with its mode set to mode ("vfio" or
// "iommufd") and its spec written to dir.
func pgpuConf(t *testing.T, mode, dir string) string {
	t.Helper()
	return strings.Replace(exampleConf(t, "pgpu.d/pgpu.conf", dir), `"mode": "vfio"`, `"mode": "`+mode+`"`, 1)
}

// On the VFIO host, whole GPUs go with their IOMMU groups: a group with a
// function left to a host driver is unusable and says why; the GPU and
// audio function that share a group are one unit; the container node
// comes once, after every group; a NUMA request gets its socket's GPU;
// the spec carries the nodes. The default DRM config lists these GPUs as
// unusable, naming the example.
func TestVFIOGroups(t *testing.T) {
	n := newNode(t, fixture.VFIOHost())
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := pgpuConf(t, "vfio", dir)
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["pgpu"]; got != float64(3) {
		t.Fatalf("INFO: %v", got)
	}
	devs := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))
	if d := devs["0000:ab:00.0"]; d.Usable || d.Reason != "IOMMU group 71: 0000:ab:00.1 is bound to snd_hda_intel, not vfio-pci (bind every function of the group to vfio-pci)" {
		t.Fatalf("the group with a host driver: %+v", d)
	}
	if len(devs) != 4 || devs["0000:9a:00.1"].Key != "" {
		t.Fatalf("DEVICES lists the display functions only: %v", devs)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_NUMA_LOCALITY=1")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/60 /dev/vfio/vfio" {
		t.Fatalf("ADD pgpu:1 on node 1: %s", got)
	}
	r = n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:2", "CDI_REQUEST_ID=vm2")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/20 /dev/vfio/31 /dev/vfio/vfio" {
		t.Fatalf("ADD pgpu:2: %s", got)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm3"); r.code(t) != 103 {
		t.Fatalf("ADD beyond the usable groups: %s", r.stdout)
	}
	if got := specEntries(t, dir); got["vm2"] != "/dev/vfio/20 /dev/vfio/31 /dev/vfio/vfio" || got["vm2_0000:18:00.0"] != "/dev/vfio/20 /dev/vfio/vfio" {
		t.Fatalf("spec entries: %v", got)
	}
	d := inventory(t, n.run("drm", shippedDRMConf(t), "CDI_COMMAND=DEVICES"))["0000:18:00.0"]
	if d.Usable || !strings.Contains(d.Reason, "conf/examples/pgpu.d/pgpu.conf") || d.HeldBy != "vm2" {
		t.Fatalf("the default config's DEVICES: %+v", d)
	}
}

// With iommufd, a GPU goes as the VFIO device file of each function of
// its group, then /dev/iommu once; a kernel without iommufd is a reason.
func TestVFIOIOMMUFD(t *testing.T) {
	n := newNode(t, fixture.VFIOHost())
	conf := pgpuConf(t, "iommufd", filepath.Join(t.TempDir(), "cdi"))
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:3", "CDI_REQUEST_ID=vm1")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/devices/vfio0 /dev/vfio/devices/vfio1 /dev/vfio/devices/vfio2 /dev/vfio/devices/vfio3 /dev/iommu" {
		t.Fatalf("ADD pgpu:3: %s", got)
	}
	h := fixture.VFIOHost()
	h.IOMMUFD = false
	n = newNode(t, h)
	d := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))["0000:18:00.0"]
	if d.Usable || !strings.Contains(d.Reason, "/dev/iommu does not exist") {
		t.Fatalf("without iommufd: %+v", d)
	}
}

// IOMMU group numbers are the kernel's to give: after a reboot that
// renumbers them, a replayed ADD answers and publishes the GPU's new group
// node, and the key (the PCI address) keeps the holder.
func TestVFIORenumbering(t *testing.T) {
	h := fixture.VFIOHost()
	n := newNode(t, h)
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := pgpuConf(t, "vfio", dir)
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_NUMA_LOCALITY=1")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/60 /dev/vfio/vfio" {
		t.Fatalf("ADD: %s", got)
	}
	if err := os.RemoveAll(n.root); err != nil {
		t.Fatal(err)
	}
	for i := range h.GPUs {
		if g := h.GPUs[i].IOMMUGroup; g != nil {
			h.GPUs[i].IOMMUGroup = fixture.Int(*g + 100)
		}
	}
	if err := h.Build(n.root); err != nil {
		t.Fatal(err)
	}
	r = n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_NUMA_LOCALITY=1")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/160 /dev/vfio/vfio" {
		t.Fatalf("replay after renumbering: %s", got)
	}
	// The spec the replay rewrites names the new group too.
	if got := specEntries(t, dir); got["vm1"] != "/dev/vfio/160 /dev/vfio/vfio" || got["vm1_0000:9a:00.0"] != "/dev/vfio/160 /dev/vfio/vfio" {
		t.Fatalf("spec after the replay: %v", got)
	}
	if d := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))["0000:9a:00.0"]; d.HeldBy != "vm1" {
		t.Fatalf("holder after renumbering: %+v", d)
	}
	// A group whose node is gone is not handed out.
	if err := os.Remove(filepath.Join(n.root, "dev/vfio/131")); err != nil {
		t.Fatal(err)
	}
	r = n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm2", "CDI_REQUEST_NUMA_LOCALITY=0")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/120 /dev/vfio/vfio" {
		t.Fatalf("ADD with group 131's node gone: %s", got)
	}
}

// specEntries reads the one spec file in dir: each CDI device's node
// paths, by name.
func specEntries(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("spec files: %v %v", files, err)
	}
	got := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
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
			t.Fatalf("spec %s: %v", f, err)
		}
		for _, d := range spec.Devices {
			var paths []string
			for _, n := range d.ContainerEdits.DeviceNodes {
				paths = append(paths, n.Path)
			}
			got[d.Name] = strings.Join(paths, " ")
		}
	}
	return got
}

// cdictl on the new server hosts, with the shipped examples: add gives
// the nodes in the protocol's order, devices shows every GPU with its
// reason or holder, and the DEVICES answers are golden.
func TestCdictlOnGPUServerHosts(t *testing.T) {
	for _, tt := range []struct {
		name, conf, rel, req, want, golden string
		host                               fixture.Host
	}{
		{"h200-vm", "compute.d/nvidia-compute.conf", "compute.d/c.conf", "compute:1", computeNodes(0), "h200_compute_devices", fixture.H200VM()},
		{"gke-a3", "compute.d/nvidia-compute.conf", "compute.d/c.conf", "compute:8", computeNodes(0, 1, 2, 3, 4, 5, 6, 7), "", fixture.GKEA3()},
		{"vfio-host", "pgpu.d/pgpu.conf", "pgpu.d/p.conf", "pgpu:3", "/dev/vfio/20 /dev/vfio/31 /dev/vfio/60 /dev/vfio/vfio", "vfio_pgpu_devices", fixture.VFIOHost()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cdi")
			b, err := os.ReadFile(filepath.Join("../../conf/examples", tt.conf))
			if err != nil {
				t.Fatal(err)
			}
			conf := string(b)
			if strings.Contains(conf, `"kind"`) {
				conf = exampleConf(t, tt.conf, dir)
			}
			n := newCtlNode(t, tt.host, map[string]string{tt.rel: conf})
			if tt.golden != "" {
				golden(t, tt.golden, n.run("drm", conf, "CDI_COMMAND=DEVICES"))
			}
			var add struct{ Devices []string }
			r := n.ctl("add", "--id", "pod", tt.req)
			r.json(t, &add)
			if r.status != 0 || strings.Join(add.Devices, " ") != tt.want {
				t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
			}
			dev := n.ctl("devices", "-o", "table")
			if dev.status != 0 || !strings.Contains(dev.stdout, "held by pod") {
				t.Fatalf("devices: %d %s %s", dev.status, dev.stdout, dev.stderr)
			}
			if tt.name == "vfio-host" && !strings.Contains(dev.stdout, "unusable: IOMMU group 71") {
				t.Fatalf("devices: %s", dev.stdout)
			}
			if r := n.ctl("del", "--id", "pod"); r.status != 0 {
				t.Fatalf("del: %s %s", r.stdout, r.stderr)
			}
		})
	}
}

// A GPU of a no-IOMMU group (/dev/vfio/noiommu-<group>: no IOMMU confines
// its DMA) is not handed out unless the config says allow_noiommu: INFO
// does not count it, DEVICES lists it unusable, marked noiommu, saying
// why and which key allows it, and a pinned ADD of it is 103 with that
// reason. With allow_noiommu it is handed out as its noiommu node.
// allow_noiommu outside VFIO mode is an invalid config.
func TestVFIONoIOMMU(t *testing.T) {
	h := fixture.VFIOHost()
	h.NoIOMMUGroups = []int{31}
	n := newNode(t, h)
	dir := filepath.Join(t.TempDir(), "cdi")
	conf := pgpuConf(t, "vfio", dir)
	if got := n.run("drm", conf, "CDI_COMMAND=INFO").obj(t)["pgpu"]; got != float64(2) {
		t.Fatalf("INFO: %v", got)
	}
	const why = "IOMMU group 31 is a no-IOMMU group (/dev/vfio/noiommu-31)"
	devs := inventory(t, n.run("drm", conf, "CDI_COMMAND=DEVICES"))
	if d := devs["0000:2a:00.0"]; d.Usable || !d.NoIOMMU || !strings.Contains(d.Reason, why) || !strings.Contains(d.Reason, `"allow_noiommu": true`) {
		t.Fatalf("the no-IOMMU GPU: %+v", d)
	}
	if d := devs["0000:18:00.0"]; !d.Usable || d.NoIOMMU {
		t.Fatalf("a GPU with an IOMMU: %+v", d)
	}
	r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_DEVICES=0000:2a:00.0")
	if r.code(t) != 103 || !strings.Contains(r.stdout, "0000:2a:00.0: "+why) {
		t.Fatalf("pinned ADD of the no-IOMMU GPU: %s", r.stdout)
	}
	if r := n.run("drm", conf, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:3", "CDI_REQUEST_ID=vm1"); r.code(t) != 103 {
		t.Fatalf("ADD of 3 with 2 usable: %s", r.stdout)
	}

	allowed := strings.Replace(conf, `"mode": "vfio"`, `"mode": "vfio", "allow_noiommu": true`, 1)
	if allowed == conf {
		t.Fatalf("no mode in the pgpu example to add allow_noiommu to:\n%s", conf)
	}
	if got := n.run("drm", allowed, "CDI_COMMAND=INFO").obj(t)["pgpu"]; got != float64(3) {
		t.Fatalf("INFO with allow_noiommu: %v", got)
	}
	d := inventory(t, n.run("drm", allowed, "CDI_COMMAND=DEVICES"))["0000:2a:00.0"]
	if !d.Usable || !d.NoIOMMU || strings.Join(d.Nodes, " ") != "/dev/vfio/noiommu-31 /dev/vfio/vfio" {
		t.Fatalf("the no-IOMMU GPU with allow_noiommu: %+v", d)
	}
	r = n.run("drm", allowed, "CDI_COMMAND=ADD", "CDI_REQUEST=pgpu:1", "CDI_REQUEST_ID=vm1", "CDI_REQUEST_DEVICES=0000:2a:00.0")
	if got := strings.Join(r.devices(t), " "); got != "/dev/vfio/noiommu-31 /dev/vfio/vfio" {
		t.Fatalf("pinned ADD with allow_noiommu: %s", got)
	}

	if r := n.run("drm", drmConf(`{"want_device_nodes":["render"],"allow_noiommu":true}`), "CDI_COMMAND=INFO"); r.code(t) != 101 ||
		!strings.Contains(r.stdout, "allow_noiommu: applies to GPUs handed out by their IOMMU group only") {
		t.Fatalf("allow_noiommu outside VFIO mode: %s", r.stdout)
	}
}
