package dra

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdi-exec/plugins/test/fixture"
	resourceapi "k8s.io/api/resource/v1"
)

// The pool's slices: counter sets first and apart, then the devices, 128
// a slice, or 64 once any device has a taint or consumes counters.
func TestPoolSlices(t *testing.T) {
	plain := func(n int) []resourceapi.Device {
		var out []resourceapi.Device
		for i := range n {
			out = append(out, resourceapi.Device{Name: fmt.Sprint("tty", i)})
		}
		return out
	}
	sizes := func(p []resourceapi.Device) []int {
		var out []int
		for _, s := range resourceSlices(p).Slices {
			out = append(out, len(s.Devices))
		}
		return out
	}
	if got := sizes(plain(130)); fmt.Sprint(got) != "[128 2]" {
		t.Errorf("130 plain devices: slices of %v", got)
	}
	if got := sizes(nil); fmt.Sprint(got) != "[0]" {
		t.Errorf("no devices: slices of %v", got)
	}
	tainted := plain(70)
	tainted[69].Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if got := sizes(tainted); fmt.Sprint(got) != "[64 6]" {
		t.Errorf("70 devices, one tainted: slices of %v", got)
	}

	var vfs []resourceapi.Device
	for pf := range 9 {
		for k := range 4 {
			c, ok := consumesPF(fmt.Sprintf("0000:%02x:00.0", 0x10+pf))
			if !ok {
				t.Fatal("a PF's address gives no counter set")
			}
			vfs = append(vfs, resourceapi.Device{Name: fmt.Sprintf("pci-0000-%02x-00-%d", 0x10+pf, k+1), ConsumesCounters: c})
		}
	}
	p := resourceSlices(vfs)
	if len(p.Slices) != 3 || len(p.Slices[0].SharedCounters) != 8 || len(p.Slices[1].SharedCounters) != 1 ||
		len(p.Slices[0].Devices) != 0 || len(p.Slices[2].Devices) != 36 || len(p.Slices[2].SharedCounters) != 0 {
		t.Fatalf("36 VFs of 9 PFs: %d slices", len(p.Slices))
	}
	set := p.Slices[0].SharedCounters[0]
	q := set.Counters[counterVFs].Value
	if set.Name != "pci-0000-10-00-0" || q.Value() != 4 {
		t.Fatalf("the first PF's counter set: %+v", set)
	}
}

// An SR-IOV PF that has no VFs yet is published as the VFs it can have,
// each consuming one of the PF's counter set, so that the scheduler
// never allocates more; preparing a claim for one of them creates the
// PF's VFs, through the sriov plugin's pinned ADD, and hands out that
// VF's node.
func TestPartitionableSRIOV(t *testing.T) {
	h := fixture.Host{GPUs: []fixture.GPU{{Addr: "0000:03:00.0", Vendor: "0x8086", Device: "0x56c0", NUMA: fixture.Int(0),
		Driver: "i915", Card: 0, Render: 128, Control: -1, TotalVFs: 8, IOMMUGroup: fixture.Int(3)}}}
	n := newNode(t, h, map[string]string{"vgpu.d/sriov.conf": `{"cdiVersion": "0.0.2", "name": "vGPUs", "type": "vgpu", "plugin": "sriov",
  "args": {"pf_pci_addresses": ["0000:03:00.0"], "num_vfs": 4, "delegate": {"plugin": "drm", "args": {"want_device_nodes": ["render"]}}}}`})
	k, err := fixture.StartKernel(n.root, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	n.start(n.options())
	const driver = "vgpu.cdi-exec.io"
	vfs := []string{"pci-0000-03-00-1", "pci-0000-03-00-2", "pci-0000-03-00-3", "pci-0000-03-00-4"}
	devs := n.waitSlice(driver, vfs)
	for _, d := range devs {
		if len(d.ConsumesCounters) != 1 || d.ConsumesCounters[0].CounterSet != "pci-0000-03-00-0" {
			t.Fatalf("VF %s consumes %+v", d.Name, d.ConsumesCounters)
		}
	}
	var sets []resourceapi.CounterSet
	for _, s := range n.slices(driver) {
		sets = append(sets, s.Spec.SharedCounters...)
	}
	if len(sets) != 1 || sets[0].Name != "pci-0000-03-00-0" {
		t.Fatalf("counter sets %+v", sets)
	}
	if q := sets[0].Counters[counterVFs].Value; q.Value() != 4 {
		t.Fatalf("the PF's counter set holds %v VFs", q.String())
	}
	c := n.claim("vf", uid(9), driver, "pci-0000-03-00-3")
	got := n.prepare(driver, c)
	if got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare: %+v", got)
	}
	if nodes := n.specNodes(got.Devices[0].CdiDeviceIds); !slices.Equal(nodes, []string{"/dev/dri/renderD162"}) {
		t.Fatalf("the prepared VF gives %v", nodes)
	}
	if b, err := os.ReadFile(filepath.Join(n.root, "sys/bus/pci/devices/0000:03:00.0/sriov_numvfs")); err != nil || strings.TrimSpace(string(b)) != "4" {
		t.Fatalf("sriov_numvfs %q (%v) after the prepare", b, err)
	}
}
