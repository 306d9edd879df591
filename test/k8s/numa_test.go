//go:build e2enode

package k8se2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cdi-exec/plugins/test/fixture"
)

// numaHost has two NUMA nodes, an AMD GPU on each (0000:10:00.0 on node 0,
// 0000:11:00.0 on node 1, each behind a root port of its own root
// complex), and a USB controller on node 1 with the serial adapter
// ttyUSB0.
func numaHost() fixture.Host {
	h := fixture.Host{NUMA: []fixture.NUMANode{{CPUs: "0-1", MemoryMiB: 1024, Distances: []int{10, 21}}, {CPUs: "2-3", MemoryMiB: 1024, Distances: []int{21, 10}}}}
	for i := range 2 {
		h.GPUs = append(h.GPUs, fixture.GPU{Addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Vendor: "0x1002", Device: "0x73bf",
			NUMA: fixture.Int(i), Driver: "amdgpu", Card: i, Render: 128 + i, Control: -1,
			Bridges: []string{fmt.Sprintf("0000:%02x:01.0", 0x80*i)}})
	}
	h.USBHosts = []fixture.USBHost{{Addr: "0000:80:14.0", NUMA: fixture.Int(1), TTYs: []int{0}}}
	return h
}

// TestClusterDRANUMA: on a two-node fixture host, a claim for a GPU and a
// serial adapter (another driver) constrained by matchAttribute on the
// standard resource.kubernetes.io/numaNode gets the GPU of the adapter's
// node, and its pod sees both; a GPU selected by the standard attribute
// is that node's.
func TestClusterDRANUMA(t *testing.T) {
	ctx, f := newFixtureRun(t, 30*time.Minute, numaHost(), false, map[string]string{
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
}
