package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
)

// shippedConfigs returns the configs `make install-conf` installs:
// conf/<type>.d/*.conf, relative to conf/.
func shippedConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../conf/*.d/*.conf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped configs: %v", err)
	}
	return files
}

// The configs installed by default must be safe on any node: they never
// re-partition anything (no sriov) and filter nothing by made-up ids, so
// that they hand out every GPU with a DRM node and the ttys above the
// reserve. Configs that must be adapted live in conf/examples/.
func TestShippedConfigsAreSafe(t *testing.T) {
	adapt := []string{"vendorid_whitelist", "deviceid_whitelist", "pci_addresses",
		"pf_pci_addresses", "pf_vendorid_whitelist", "pf_deviceid_whitelist"}
	for _, f := range shippedConfigs(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Plugin string
			Args   map[string]json.RawMessage
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if c.Plugin == "sriov" {
			t.Errorf("%s: sriov re-partitions PFs; it belongs in conf/examples/", f)
		}
		for _, a := range adapt {
			if _, ok := c.Args[a]; ok {
				t.Errorf("%s: %s must be adapted per node; it belongs in conf/examples/", f, a)
			}
		}
	}
}

// What the shipped configs hand out on the demo host: every GPU with a DRM
// node (5: the SR-IOV PF with active VFs and its VFs are not whole GPUs),
// and tty13..tty63; nothing else.
func TestShippedConfigsOnDemoHost(t *testing.T) {
	n := demoNode(t, "../../conf")
	var caps map[string]any
	r := n.ctl("info")
	r.json(t, &caps)
	want := map[string]any{"cdiVersion": "0.0.2", "gpu": float64(5), "tty": float64(51)}
	if r.status != 0 || !reflect.DeepEqual(caps, want) {
		t.Fatalf("info: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("conf/examples/ (or anything else) disturbed config discovery: %s", r.stderr)
	}
	var add struct{ Devices []string }
	r = n.ctl("add", "--id", "p", "gpu:5,tty:1")
	r.json(t, &add)
	if r.status != 0 || len(add.Devices) != 11 || add.Devices[8] != "/dev/dri/card4" || add.Devices[10] != "/dev/tty13" {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
}

// Every example config is accepted by its plugin as it stands: INFO
// succeeds on the demo host, where none of their devices exist.
func TestExampleConfigsAreValid(t *testing.T) {
	n := demoNode(t, "../../conf/examples")
	var caps map[string]any
	r := n.ctl("info")
	r.json(t, &caps)
	want := map[string]any{"cdiVersion": "0.0.2", "gpu": float64(0), "vgpu": float64(0), "vfio": float64(0), "serial": float64(3), "compute": float64(0), "cuda": float64(0), "cudadistro": float64(0), "pgpu": float64(0),
		"kvm": float64(0), "fuse": float64(0), "tun": float64(0), "usbserial": float64(0), "camera": float64(0), "fido": float64(0), "npu": float64(0)}
	if r.status != 0 || r.stderr != "" || !reflect.DeepEqual(caps, want) {
		t.Fatalf("info: %d %s %s", r.status, r.stdout, r.stderr)
	}
}

// The generic plugin's example configs on the generic-devices host: kvm,
// fuse and tun with their shares, the two adapters whose serials the
// example names (not the third), the camera with both its nodes, the
// YubiKey and the NPU; one request takes one of each.
func TestGenericExampleConfigs(t *testing.T) {
	needRealNodes(t)
	conf, err := filepath.Abs("../../conf/examples")
	if err != nil {
		t.Fatal(err)
	}
	n := &ctlNode{node: newNode(t, fixture.GenericDevices()), scripts: t.TempDir(), conf: conf}
	var caps map[string]any
	r := n.ctl("info")
	r.json(t, &caps)
	want := map[string]any{"cdiVersion": "0.0.2", "gpu": float64(0), "vgpu": float64(0), "vfio": float64(0), "serial": float64(0),
		"compute": float64(0), "cuda": float64(0), "cudadistro": float64(0), "pgpu": float64(0), "kvm": float64(8), "fuse": float64(16), "tun": float64(16), "usbserial": float64(2), "camera": float64(1), "fido": float64(1), "npu": float64(1)}
	if r.status != 0 || !reflect.DeepEqual(caps, want) {
		t.Fatalf("info: %d %s %s", r.status, r.stdout, r.stderr)
	}
	var add struct{ Devices []string }
	r = n.ctl("add", "--id", "p", "camera:1,fido:1,fuse:1,kvm:1,npu:1,tun:1,usbserial:2")
	r.json(t, &add)
	wantDevs := "/dev/video0 /dev/video1 /dev/hidraw0 /dev/fuse /dev/kvm /dev/accel/accel0 /dev/net/tun /dev/ttyUSB0 /dev/ttyUSB1"
	if r.status != 0 || strings.Join(add.Devices, " ") != wantDevs {
		t.Fatalf("add: %d %s %s", r.status, r.stdout, r.stderr)
	}
	if r := n.ctl("add", "--id", "q", "usbserial:1"); r.status == 0 {
		t.Fatalf("a third adapter: %s", r.stdout)
	}
	// cdictl devices shows the shares held and a USB device's ids.
	r = n.ctl("devices", "-o", "table")
	var rows []string
	for _, l := range strings.Split(r.stdout, "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{"kvm generic kvm /dev/kvm - - - - 1 of 8 shares held by p",
		"usbserial generic 1a86:7523:A50285BI /dev/ttyUSB0 1a86:7523 - 0 - held by p"} {
		if !slices.Contains(rows, want) {
			t.Errorf("cdictl devices lacks %q:\n%s", want, r.stdout)
		}
	}
}
