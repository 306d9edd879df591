//go:build e2enode

package k8se2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// numaHost has two NUMA nodes, an AMD GPU on each (0000:10:00.0 on node 0,
// 0000:11:00.0 on node 1, each behind a root port of its own root
// complex) with AMD's compute node /dev/kfd, and a USB controller on node
// 1 with the serial adapter ttyUSB0. Rebooted, the GPUs came up the other
// way round (10:00.0 has card1 and renderD129, 11:00.0 card0 and
// renderD128) and kfd got another dynamic major, as test/e2e's
// TestRenumberedAcrossReboot lays it out.
func numaHost(rebooted bool) fixture.Host {
	h := fixture.Host{NUMA: []fixture.NUMANode{{CPUs: "0-1", MemoryMiB: 1024, Distances: []int{10, 21}}, {CPUs: "2-3", MemoryMiB: 1024, Distances: []int{21, 10}}}, KFD: true}
	for i := range 2 {
		n := i
		if rebooted {
			n = 1 - i
		}
		h.GPUs = append(h.GPUs, fixture.GPU{Addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Vendor: "0x1002", Device: "0x73bf",
			NUMA: fixture.Int(i), Driver: "amdgpu", Card: n, Render: 128 + n, Control: -1,
			Bridges: []string{fmt.Sprintf("0000:%02x:01.0", 0x80*i)}})
	}
	h.USBHosts = []fixture.USBHost{{Addr: "0000:80:14.0", NUMA: fixture.Int(1), TTYs: []int{0}}}
	if rebooted {
		h.Majors = map[string]int{"kfd": 511}
	}
	return h
}

// TestClusterDRANUMA: on a two-node fixture host, a claim for a GPU and a
// serial adapter (another driver) constrained by matchAttribute on the
// standard resource.kubernetes.io/numaNode gets the GPU of the adapter's
// node, and its pod sees both; a GPU selected by the standard attribute
// is that node's. Then RebootRenumbered: the node reboots (Node.Reboot)
// while the GPUs swap their DRM minors and /dev/kfd its major under their
// PCI addresses, and the spec dir (a tmpfs) is emptied: both pods run
// again, each claim keeping its GPU, and each pod sees its GPU's new
// nodes with the new numbers, as the fixture host now has them.
func TestClusterDRANUMA(t *testing.T) {
	ctx, f := newFixtureRun(t, 30*time.Minute, numaHost(false), false, map[string]string{
		"gpu":    `{"cdiVersion": "0.0.2", "name": "GPUs", "type": "gpu", "plugin": "drm"}`,
		"serial": `{"cdiVersion": "0.0.2", "name": "USB serial", "type": "serial", "plugin": "generic-tty", "args": {"pattern": "ttyUSB"}}`,
	}, map[string][]string{
		"gpu":    {"pci-0000-10-00-0", "pci-0000-11-00-0"},
		"serial": {"x-tty-u-s-b0"},
	})

	f.yaml(ctx, t, claimYAML("default", "aligned", `
requests:
- name: gpu
  exactly: {deviceClassName: gpu.cdi-exec.io, count: 1}
- name: serial
  exactly: {deviceClassName: serial.cdi-exec.io, count: 1}
constraints:
- requests: [gpu, serial]
  matchAttribute: resource.kubernetes.io/numaNode`))
	nodes := f.podNodes(ctx, t, "aligned", "aligned", "/dev/dri", "/dev")
	got := f.allocated(ctx, t, "aligned")
	if !slices.Equal(got["gpu"], []string{"pci-0000-11-00-0"}) || !slices.Equal(got["serial"], []string{"x-tty-u-s-b0"}) {
		t.Fatalf("the aligned claim got %v, want the GPU of node 1 with the adapter", got)
	}
	for _, want := range []string{"/dev/dri/card1=e2:1", "/dev/dri/renderD129=e2:81", "/dev/ttyUSB0=bc:0"} {
		if !slices.Contains(nodes, want) {
			t.Fatalf("the pod sees %v, without %s", nodes, want)
		}
	}
	t.Logf("matchAttribute resource.kubernetes.io/numaNode: %v; the pod sees %v", got, nodes)

	f.yaml(ctx, t, claimYAML("default", "node0", `
requests:
- name: gpu
  exactly:
    deviceClassName: gpu.cdi-exec.io
    selectors: [{cel: {expression: 'device.attributes["resource.kubernetes.io"].numaNode == 0'}}]`))
	f.podNodes(ctx, t, "node0", "node0", "/dev/dri")
	if got := f.allocated(ctx, t, "node0"); !slices.Equal(got["gpu"], []string{"pci-0000-10-00-0"}) {
		t.Fatalf("the claim selecting numaNode 0 got %v", got)
	}
	t.Run("RebootRenumbered", func(t *testing.T) { f.rebootRenumbered(ctx, t) })
}

// rebootRenumbered reboots the node of TestClusterDRANUMA into the
// renumbered host and checks what its pods see after.
func (f *fixtureRun) rebootRenumbered(ctx context.Context, t *testing.T) {
	before := map[string]Pod{}
	for _, name := range []string{"aligned", "node0"} {
		p, err := f.c.WaitPod(ctx, "default", name, Running)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = p
	}
	kfd := f.hostNode(t, "/dev/kfd")
	start := time.Now()
	f.reboot(ctx, t, numaHost(true))
	t.Logf("rebooted: containerd and the kubelet serve again %.1fs after the kubelet stopped", time.Since(start).Seconds())
	// aligned holds 0000:11:00.0, now card0; node0 0000:10:00.0, now card1.
	want := map[string][]string{
		"aligned": {f.hostNode(t, "/dev/dri/card0"), f.hostNode(t, "/dev/dri/renderD128"), f.hostNode(t, "/dev/kfd"), f.hostNode(t, "/dev/ttyUSB0")},
		"node0":   {f.hostNode(t, "/dev/dri/card1"), f.hostNode(t, "/dev/dri/renderD129")},
	}
	if now := f.hostNode(t, "/dev/kfd"); now == kfd {
		t.Fatalf("the reboot kept %s", kfd)
	}
	for _, name := range []string{"aligned", "node0"} {
		if _, err := f.c.WaitPod(ctx, "default", name, RestartedFrom(before[name])); err != nil {
			t.Fatal(err)
		}
		line, err := f.c.WaitLogLine(ctx, name, "c", "nodes")
		if err != nil {
			t.Fatal(err)
		}
		seen := strings.Fields(strings.TrimPrefix(line, "nodes"))
		for _, w := range want[name] {
			if !slices.Contains(seen, w) {
				t.Errorf("after the reboot %s sees %v, without %s", name, seen, w)
			}
		}
		gpu := map[string]string{"aligned": "pci-0000-11-00-0", "node0": "pci-0000-10-00-0"}[name]
		if got := f.allocated(ctx, t, name); !slices.Equal(got["gpu"], []string{gpu}) {
			t.Errorf("after the reboot the claim %s has %v, want %s", name, got, gpu)
		}
		t.Logf("%s runs again %.1fs after the reboot began and sees %v", name, time.Since(start).Seconds(), seen)
	}
}
